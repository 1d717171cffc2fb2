from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("wtwin")
except PackageNotFoundError:  # running from a plain checkout
    __version__ = "0.0.0+unknown"
