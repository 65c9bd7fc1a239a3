"""Wire formats: the only code that knows one.

:mod:`proxy.wire.base` declares the small role contracts a format composes (a codec for
bodies, a stream codec, server-side chains, a signed transcript, the judge's dialect) and
:class:`~proxy.wire.base.WireFormat`, the one frozen object per format; a role a format does
not have is ``None``. Each format is a subpackage (:mod:`proxy.wire.chat`,
:mod:`proxy.wire.responses`, :mod:`proxy.wire.messages`) with ``parse``, ``render``,
``stream``, only what its format has (``relay``, ``chains``, ``transcript``) and ``format``;
:mod:`proxy.wire.registry` lists them; :mod:`proxy.wire.sse` frames server-sent events for all.
The route picks the format; everything else reads :mod:`proxy.exchange` and hands the role it
names neutral turns and endings to render.
"""
