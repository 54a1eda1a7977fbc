# SPDX-License-Identifier: MIT
"""nvswap.Config against hostile input (issue 34, "keep what works"):
each is a ConfigError (errno EINVAL) naming the file, line, column and
key, never a crash, a hang or a silently taken value."""
import errno
import os

import pytest

import nvswap

PARAM = ('{"zero_optimization": {"offload_param": {"device": "nvme", '
         '"nvme_path": "/var/tmp", "buffer_size": %s}}}')
BS = "zero_optimization.offload_param.buffer_size"


def refused(text, name="<string>"):
    with pytest.raises(nvswap.ConfigError) as ei:
        if isinstance(text, bytes):
            nvswap.Config.load(name)
        else:
            nvswap.Config.from_str(text, name=name)
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, nvswap.Error)
    assert e.errno == errno.EINVAL
    return e


@pytest.mark.parametrize("text, col, near", [
    ('{"aio": {"block_size": 4096, "block_size": 8192}}', 41,
     "duplicate object key near '\"block_size\"'"),
    ('{"aio": {"block_size": NaN}}', 26, "invalid token near 'NaN'"),
    ('{"aio": {"block_size": 1e400}}', 28,
     "real number overflow near '1e400'"),
    ('{"aio": {"block_size": %d}}' % 2**64, 43,
     "too big integer near '18446744073709551616'"),
    ('{"aio": {} // a comment\n}', 12, "'}' expected near '/'"),
    ('/* a comment */ {"aio": {}}', 1, "'[' or '{' expected near '/'"),
    ('\ufeff{"aio": {}}', 1, "'[' or '{' expected near '\ufeff'"),
])
def test_what_json_does_not_allow_is_refused_at_its_position(text, col,
                                                             near):
    e = refused(text, name="c.json")
    assert (e.file, e.line, e.column, e.key) == ("c.json", 1, col,
                                                 "malformed JSON")
    assert e.strerror == f"c.json:1:{col}: malformed JSON: {near}"


def test_a_nul_in_a_path_is_refused_not_cut_short():
    text = PARAM.replace("/var/tmp", "/var/tmp\\u0000/etc") % 4096
    e = refused(text)
    assert (e.line, e.key) == (1, "malformed JSON")
    # the column of the string's closing quote, where jansson stops
    assert e.column == text.index('/etc"') + len('/etc"')
    assert "\\u0000 is not allowed" in e.strerror


@pytest.mark.parametrize("value, says", [
    ("-1", "must be a whole number of at least 1 (got -1)"),
    ("1.5", "must be a whole number of at least 1 (got 1.5)"),
    ('"1x"', "must be a number"),
])
def test_negative_fractional_and_string_sizes_name_the_key(value, says):
    text = PARAM % value
    e = refused(text)
    assert (e.line, e.column, e.key) == (1, text.index('"buffer_size"') + 1,
                                         BS)
    assert e.strerror == f"<string>:1:{e.column}: {BS}: {says}"
    e = refused('{"aio": {"block_size": %s}}' % value)
    assert (e.line, e.column, e.key) == (1, 10, "aio.block_size")
    assert e.strerror.endswith(f"aio.block_size: {says}")


@pytest.mark.parametrize("wrap", ["[%s]", '{"aio": %s}'])
def test_100k_deep_nesting_is_refused_at_the_depth_limit(wrap):
    text = wrap % ("[" * 100000 + "]" * 100000)
    e = refused(text)
    assert (e.line, e.key) == (1, "malformed JSON")
    opens = [i for i, c in enumerate(text) if c in "[{"]
    assert e.column == opens[2048] + 1  # the 2049th container: depth 2048
    assert "maximum parsing depth reached" in e.strerror


def test_invalid_utf8_and_a_bom_in_a_file_are_refused(diskdir):
    p = os.path.join(diskdir, "u.json")
    with open(p, "wb") as f:
        f.write(b'{"aio": {"x\xff": 1}}')
    e = refused(b"", name=p)
    assert (e.file, e.line, e.column, e.key) == (p, 1, 11, "malformed JSON")
    assert e.strerror == (f"{p}:1:11: malformed JSON: unable to decode "
                          "byte 0xff near '\"x'")
    with open(p, "wb") as f:
        f.write(b'\xef\xbb\xbf{"aio": {}}')
    e = refused(b"", name=p)
    assert (e.file, e.line, e.column) == (p, 1, 1)
    with pytest.raises(TypeError, match="text must be a str, not bytes"):
        nvswap.Config.from_str(b'{"aio": {}}')


@pytest.mark.parametrize("what", ["directory", "/dev/zero"])
def test_a_directory_or_dev_zero_is_refused_without_reading(diskdir, what):
    path = diskdir if what == "directory" else what
    e = refused(b"", name=path)
    assert (e.file, e.line, e.column, e.key) == (None, None, None, None)
    kind = "a directory" if what == "directory" else "a character device"
    # in the user's words: no library function's name
    assert e.strerror == (f"{path}: is {kind}, not a regular file of at "
                          "most 16777216 bytes")
