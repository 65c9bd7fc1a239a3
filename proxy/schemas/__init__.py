"""JSON Schema compiled once, client regexes on a bounded engine, the weighted cache behind both,
and tool arguments decoded strictly."""
