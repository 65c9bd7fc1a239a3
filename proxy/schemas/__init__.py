"""JSON Schema compiled once, client regexes on a bounded engine, and the weighted cache behind both."""
