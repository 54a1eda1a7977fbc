# SPDX-License-Identifier: MIT
"""Byte sizes as every size keyword of nvswap.torch reads them (memory=,
buffer_size=, optimizer_buffer_size=, max_shard_size=), by the rule the
C library's nvs_parse_size() follows for the rest (include/nvswap/
common.h): one rule, stated in every error."""
import re

RULE = ("a size is a whole number of bytes with an optional unit: K, M, "
        "G, T or KiB, MiB, GiB, TiB are binary (2^10 to 2^40), KB, MB, GB, "
        "TB decimal (10^3 to 10^12, as transformers reads them); the unit's "
        "letter in either case; a lowercase b after it (1Gb, 100mb) is "
        "refused")
MOST = (1 << 64) - 1
_FORM = re.compile(r"([0-9]+)(?:([KMGTkmgt])(?:([iI]?)([Bb]))?)?")


def parse(text):
    """Bytes of text (a str) by RULE. ValueError saying what is wrong
    and stating RULE."""
    m = _FORM.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size; {RULE}")
    digits, unit, i, b = m.groups()
    n = int(digits)
    if unit:
        power = " KMGT".index(unit.upper())
        if b == "b":
            shown = f"{digits}{unit.upper()}"
            how = (f"a lowercase b is a byte to transformers and "
                   f"accelerate here ({text} = {n << 10 * power} bytes) "
                   "and a bit to other tools" if i else
                   f"a lowercase b is a bit to transformers and "
                   f"accelerate ({shown}b = {n * 1000 ** power // 8} "
                   "bytes) and a byte to most other tools")
            raise ValueError(
                f"{text!r} is ambiguous: {how}: write {shown}B "
                f"({n * 1000 ** power} bytes) or {shown}iB "
                f"({n << 10 * power} bytes); {RULE}")
        n = n * 1000 ** power if b and not i else n << 10 * power
    if n > MOST:
        raise ValueError(f"{text!r} is larger than 2^64 - 1 bytes; {RULE}")
    return n


def keyword(fn, name, value):
    """The bytes of size keyword name of nvswap.torch.fn: value an int >
    0, or a str by RULE naming more than 0 bytes. TypeError for any other
    type, ValueError naming fn, the keyword and its value, and stating
    RULE."""
    what = "a byte count > 0 (an int, or a str such as '64M')"
    if isinstance(value, str):
        try:
            n = parse(value)
        except ValueError as e:
            raise ValueError(f"nvswap.torch.{fn}: {name}={value!r}: must "
                             f"be {what}: {e}") from None
    elif isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        raise TypeError(f"nvswap.torch.{fn}: {name} must be {what}, not "
                        f"{type(value).__name__}; {RULE}")
    if not 0 < n <= MOST:
        raise ValueError(f"nvswap.torch.{fn}: {name}={value!r}: must be "
                         f"{what}, up to 2^64 - 1; {RULE}")
    return n
