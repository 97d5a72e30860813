"""``moeplan serve``: a local planning page in the browser (the optional ``serve`` extra: Starlette, uvicorn).

:mod:`moeplan.web.app` builds the ASGI app over the same API the CLI uses (:mod:`moeplan.api`,
:mod:`moeplan.checker`, :mod:`moeplan.explain`); :mod:`moeplan.cli.serve` is the CLI's ``serve`` command.
Nothing here is imported by ``moeplan --help`` or by the other commands.
"""
