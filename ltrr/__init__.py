from ltrr._version import __version__
