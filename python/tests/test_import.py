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
