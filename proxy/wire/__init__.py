"""Wire formats: the only code that knows one.

:mod:`proxy.wire.base` declares the :class:`~proxy.wire.base.WireAdapter` protocol; each
format is a sibling implementing it (:mod:`proxy.wire.chat.adapter`, with its stream
assembler :mod:`proxy.wire.chat.stream`). The route picks the adapter; everything else reads
:mod:`proxy.exchange` and hands the adapter neutral turns and endings to render.
"""
