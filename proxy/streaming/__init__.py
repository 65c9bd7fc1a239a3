"""Streaming: hold back what a guard may still object to, and write a consistent stream.

``sse`` frames events; ``reader`` reads the upstream's stream into a reply as it arrives;
``holdback`` says which channels the guards still hold; ``client`` writes what may go out
(and endings, keep-alives, errors); ``attempts`` runs one streamed upstream attempt.
"""
