"""One table of how money and measurements read, which the server (apps.core.money,
apps.core.template_filters), the CLI (trainyard_cli.formats) and the browser
(static/js/format.js) must all follow: tests/core/test_formats_agree.py and
tests/browser/test_numbers_read_alike.py hold each of them to it."""

from __future__ import annotations

# (micro-dollars, as people read it)
MONEY: list[tuple[int, str]] = [
    (0, "$0.00"),
    (1, "<$0.001"),
    (499, "<$0.001"),
    (500, "$0.001"),
    (1_667, "$0.002"),
    (4_200, "$0.004"),
    (25_000, "$0.025"),
    (100_000, "$0.10"),
    (105_000, "$0.105"),
    (999_499, "$0.999"),
    (999_500, "$1.00"),
    (1_234_500, "$1.23"),
    (1_235_000, "$1.24"),
    (2_490_000, "$2.49"),
    (99_975_003, "$99.98"),
    (1_234_567_890_000, "$1,234,567.89"),
    (-2_500_000, "-$2.50"),
    (-4_200, "-$0.004"),
]

# (a measurement, as people read it): 4 significant digits in %g's notation, short exponent,
# ties away from zero
MEASUREMENTS: list[tuple[float, str]] = [
    (7.60291, "7.603"),
    (6.008123, "6.008"),
    (2.718281828, "2.718"),
    (0.000123456, "0.0001235"),
    (1234.56, "1235"),
    (12345.6, "1.235e4"),
    (12345678.0, "1.235e7"),
    (0.0000123456, "1.235e-5"),
    (0.5, "0.5"),
    (6.0, "6"),
    (0.0, "0"),
    (-3.14159, "-3.142"),
    (1.0625, "1.063"),  # exact binary ties (bfloat16 losses): away from zero, as in JS
    (-1.0625, "-1.063"),
    (100.25, "100.3"),
    (9.99961, "10"),
    (0.000099996, "0.0001"),  # rounds up a decade, still plain
]
