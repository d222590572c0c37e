"""Maps the design card's top-level folders into the one ``hipbot`` import namespace.

Everything else is in pyproject.toml. Sub-packages are found here, so a new folder with an
``__init__.py`` under ``agents/``, ``jobs/`` or ``bot/`` installs without editing any list.
"""

from setuptools import find_packages, setup

FOLDERS = {
    "hipbot": "hipbot",
    "hipbot.agents": "agents",
    "hipbot.bot": "bot",
    "hipbot.jobs": "jobs",
    "hipbot.prompts": "prompts",
    "hipbot.deploy": "deploy",
}

packages = []
for name, folder in FOLDERS.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=FOLDERS)
