"""The selfcal version, importable from every room without importing the command line."""

VERSION = "0.1.0"
