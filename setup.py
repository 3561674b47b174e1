"""The package list, found rather than written by hand.

Everything else is in pyproject.toml. `[tool.setuptools.packages.find]` alone finds only folders
under their own names, and the top-level sample_configs/ ships as hccli.sample_configs (the
package-dir mapping in pyproject.toml), so it is added to what discovery finds under hccli/.
"""

from setuptools import find_namespace_packages, setup

setup(packages=[*find_namespace_packages(include=["hccli", "hccli.*"]), "hccli.sample_configs"])
