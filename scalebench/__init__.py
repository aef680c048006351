"""scalebench: simulate and measure how distributed training scales."""

from sim import __version__

__all__ = ["__version__"]
