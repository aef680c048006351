"""scalebench: simulate and measure how distributed training scales."""

__version__ = "0.1.0"
