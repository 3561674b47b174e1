"""hccli: the `hc` tool for the hyper-connections (mHC) of DeepSeek-V4-family models."""

__version__ = "0.1.0"
