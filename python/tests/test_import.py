# SPDX-License-Identifier: MIT
"""The package imports in a fresh interpreter and says what it is."""
import nvswap


def test_version_is_the_c_library_version():
    assert nvswap.__version__ == nvswap.version()
    assert nvswap.__version__.count(".") == 2


def test_error_is_an_oserror():
    assert issubclass(nvswap.Error, OSError)
    assert issubclass(nvswap.ConfigError, nvswap.Error)
    assert issubclass(nvswap.ConfigError, ValueError)
    assert issubclass(nvswap.FileNotFoundError, FileNotFoundError)
    assert issubclass(nvswap.FileNotFoundError, nvswap.Error)


def test_every_module_of_the_source_tree_is_installed():
    # a module left out of python/nvswap/**/meson.build is missing from
    # the installed package (pip, the wheel, build/python) and breaks
    # an import only there
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[1] / "nvswap"
    have = pathlib.Path(nvswap.__file__).resolve().parent
    missing = [str(p.relative_to(src)) for p in sorted(src.rglob("*.py"))
               if not (have / p.relative_to(src)).exists()]
    assert missing == [], f"not installed in {have}: {missing}"
