# SPDX-License-Identifier: MIT
"""One rule for every size nvswap reads (issue 46): the C parser
(nvs_parse_size, behind CkptWriter's and the swappers' byte keywords)
and nvswap.torch's keywords (memory=, buffer_size=,
optimizer_buffer_size=, max_shard_size=) read a text the same way: K, M,
G, T and KiB..TiB binary, KB..TB decimal as transformers reads them, a
lowercase b after the unit refused; each refusal names the keyword and
states the rule."""
import os

import pytest

import nvswap

RULE = ("a size is a whole number of bytes with an optional unit: K, M, "
        "G, T or KiB, MiB, GiB, TiB are binary (2^10 to 2^40), KB, MB, GB, "
        "TB decimal (10^3 to 10^12, as transformers reads them)")
TABLE = [("4096", 4096), ("64K", 64 << 10), ("64k", 64 << 10),
         ("64KiB", 64 << 10), ("64kiB", 64 << 10), ("64KIB", 64 << 10),
         ("64KB", 64000), ("64kB", 64000), ("4M", 4 << 20),
         ("4MiB", 4 << 20), ("4MB", 4000000), ("2G", 2 << 30),
         ("2GiB", 2 << 30), ("6GB", 6 * 10**9), ("1T", 1 << 40),
         ("1TiB", 1 << 40), ("1TB", 10**12),
         ("18446744073709551615", 2**64 - 1)]
SMALL = [(t, n) for t, n in TABLE if n <= 4 << 20]
AMBIGUOUS = ["1Gb", "100mb", "1kb", "1Kib", "2gib", "1Tb"]
NOT_SIZES = ["infGB", "1e-20GB", "1.5GB", " 1G", "1G ", "1 G", "G", "",
             "1B", "1b", "-1K", "1ki", "1KBB", "0x10", "١٢"]


def test_the_c_parser_reads_the_table():
    # size_hint is preallocated at open: the temp file's size is the
    # bytes nvs_parse_size read
    base = os.path.join("/var/tmp", f"nvswap-sizes-{os.getpid()}")
    for text, n in SMALL:
        w = nvswap.CkptWriter(base, size_hint=text)
        try:
            assert os.stat(w.temp_path).st_size == n, text
        finally:
            w.abort()


def test_parse_size_reads_the_table_and_refuses_the_rest():
    """nvswap.parse_size, the rule for scripts of users (the examples'
    --memory): the C parser's answers."""
    for text, n in TABLE:
        assert nvswap.parse_size(text) == n, text
    assert nvswap.parse_size(12345) == 12345
    for text in AMBIGUOUS + NOT_SIZES:
        with pytest.raises(ValueError, match="is not a byte count: "
                           "nvs_parse_size: .*" + RULE.replace("(", r"\(")
                           .replace(")", r"\)").replace("^", r"\^")):
            nvswap.parse_size(text)
    for bad in (None, 1.5, b"64K"):
        with pytest.raises(TypeError):
            nvswap.parse_size(bad)
    with pytest.raises(ValueError):
        nvswap.parse_size(-1)


@pytest.mark.parametrize("text", AMBIGUOUS + NOT_SIZES + ["18446745TB"])
def test_the_c_parser_refuses_stating_the_rule(text):
    with pytest.raises(ValueError) as ei:
        nvswap.CkptWriter("/var/tmp/never", size_hint=text)
    msg = str(ei.value)
    assert msg.startswith(f"nvswap: size_hint {text!r} is not a byte count: "
                          f"nvs_parse_size: '{text}': "), msg
    assert RULE in msg, msg
    if text in AMBIGUOUS:
        assert "ambiguous: a lowercase b is a bit to some tools" in msg
    assert not os.path.exists("/var/tmp/never")


def test_the_python_keywords_read_the_table():
    pytest.importorskip("torch", reason="nvswap.torch needs torch")
    from nvswap.torch import _sizes
    assert _sizes.RULE.startswith(RULE)
    for text, n in TABLE:
        assert _sizes.parse(text) == n, text
        assert _sizes.keyword("offload", "memory", text) == n, text


@pytest.mark.parametrize("text", AMBIGUOUS + NOT_SIZES + ["0", "0GB",
                                                         "18446745TB"])
def test_every_python_keyword_refuses_naming_itself_and_the_rule(
        diskdir, text):
    torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
    import nvswap.torch as nvt
    model = torch.nn.Linear(8, 8)
    calls = {"buffer_size": lambda: nvt.offload(
                 model, nvme_path=diskdir, buffer_size=text),
             "optimizer_buffer_size": lambda: nvt.offload(
                 model, nvme_path=diskdir, optimizer_buffer_size=text),
             "memory": lambda: nvt.offload(
                 model, nvme_path=diskdir, inference=True, memory=text),
             "max_shard_size": lambda: nvt.save_pretrained(
                 model, os.path.join(diskdir, "out"), max_shard_size=text)}
    for kw, call in calls.items():
        fn = "save_pretrained" if kw == "max_shard_size" else "offload"
        with pytest.raises(ValueError) as ei:
            call()
        msg = str(ei.value)
        assert msg.startswith(f"nvswap.torch.{fn}: {kw}={text!r}: must be "
                              "a byte count > 0 (an int, or a str such as "
                              "'64M')"), msg
        assert RULE in msg, msg
        if text in AMBIGUOUS:
            assert f"{text!r} is ambiguous: a lowercase b is a " in msg, msg
    assert os.listdir(diskdir) == []  # nothing made
    assert not hasattr(model.weight, "_nvswap")


@pytest.mark.parametrize("text,why", [
    ("1Gb", "a lowercase b is a bit to transformers and accelerate (1Gb = "
     "125000000 bytes) and a byte to most other tools: write 1GB "
     "(1000000000 bytes) or 1GiB (1073741824 bytes)"),
    # transformers upper()s "Kib" into KIB, bytes; other tools read bits
    ("1Kib", "a lowercase b is a byte to transformers and accelerate here "
     "(1Kib = 1024 bytes) and a bit to other tools: write 1KB (1000 "
     "bytes) or 1KiB (1024 bytes)")])
def test_an_ambiguous_size_names_both_readings(text, why):
    pytest.importorskip("torch", reason="nvswap.torch needs torch")
    from nvswap.torch import _sizes
    with pytest.raises(ValueError) as ei:
        _sizes.parse(text)
    assert str(ei.value).startswith(
        f"{text!r} is ambiguous: {why}; " + RULE), str(ei.value)


def test_gb_is_decimal_and_g_binary_in_every_keyword(diskdir):
    torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
    import nvswap.torch as nvt
    from nvswap.torch._export import parse_shard_size
    assert parse_shard_size("6GB") == 6 * 10**9
    # buffer_size: rounded up to 4 KiB units, 400000 -> 401408
    for text, want in (("400KB", 401408), ("400K", 409600),
                       ("400KiB", 409600)):
        m = torch.nn.Linear(8, 8)
        nvt.offload(m, nvme_path=diskdir, buffer_size=text, buffer_count=2)
        try:
            assert nvt.stats(m)["param"]["buffer_size"] == want, text
        finally:
            nvt.restore(m)
    # memory=: the budget a refusal quotes (issue 46: "6GB" was GiB)
    for text, want in (("1KB", 1000), ("1K", 1024), ("1KiB", 1024)):
        with pytest.raises(ValueError, match=f"memory={want} bytes cannot "
                           "hold two buffers"):
            nvt.offload(torch.nn.Linear(64, 64), nvme_path=diskdir,
                        inference=True, memory=text, buffer_size=32768)


def test_other_types_are_a_type_error_stating_the_rule():
    pytest.importorskip("torch", reason="nvswap.torch needs torch")
    from nvswap.torch import _sizes
    for v in (1.5, True, None, b"1G", [1]):
        with pytest.raises(TypeError) as ei:
            _sizes.keyword("offload", "memory", v)
        assert str(ei.value).startswith(
            "nvswap.torch.offload: memory must be a byte count > 0 (an int, "
            f"or a str such as '64M'), not {type(v).__name__}; " + RULE)

