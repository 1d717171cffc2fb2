"""wtwin.compiled: what the three compiled packages (`wtwin.detect`, `wtwin.daemon`,
`wtwin.emitters`) share about their two builds, and nothing else: the rules that say
which build loads (``rules.py``) and the stand-in for ``import cython`` where Cython is
not installed (``cython_shim.py``). Standard library only; imports nothing of wtwin.
"""
