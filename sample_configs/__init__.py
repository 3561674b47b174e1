"""Published DeepSeek-V4-family configs and small test configs (data only; shipped as hccli.sample_configs)."""
