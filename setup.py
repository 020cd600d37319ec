"""The build's one addition to ``setup.cfg``: the example jobs (``jobs/``) and their configs
(``conf/``) - top-level directories of the repository - are copied into the wheel, under
``streaming_exactly_once/examples/``, where ``seo run`` finds them from any directory."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithExamples(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install finds them in the clone
        target = Path(self.build_lib) / "streaming_exactly_once" / "examples"
        for name in ("jobs", "conf"):
            shutil.copytree(HERE / name, target / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithExamples})
