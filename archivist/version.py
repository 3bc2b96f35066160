"""The installed version, for `--version` and the MCP server's name."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("archivist")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
