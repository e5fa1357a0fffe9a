"""Charts drawn on the server as SVG: no script, no library, no request to anyone else.

Each function returns markup to put in a page as it is (`SafeString`); every text in it is
escaped here. Colours come from classes styled in `console.css`, and each chart carries a
title and a description for screen readers (the page shows the same numbers as a table).
"""

from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH = 640
# Space for the value labels on top and the category labels below.
TOP, BOTTOM, LEFT, RIGHT = 18, 34, 36, 8


@dataclass(frozen=True)
class Series:
    """One row of values to draw, one value per category; `css` names its colour."""

    name: str
    css: str
    values: list[int]


def _n(number: float) -> str:
    """A coordinate with one decimal (format_html escapes its arguments before formatting)."""
    return f"{number:.1f}"


def _nice_max(value: int) -> int:
    """The axis top: the smallest 1, 2 or 5 times a power of ten not below `value`."""
    if value <= 0:
        return 1
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step >= value:
                return factor * step
        step *= 10


def _frame(*, slug: str, title: str, desc: str, height: int, body: SafeString) -> SafeString:
    return format_html(
        '<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" '
        'role="img" aria-labelledby="{}-title {}-desc" preserveAspectRatio="xMinYMin meet">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}</svg>',
        WIDTH,
        height,
        slug,
        slug,
        slug,
        title,
        slug,
        desc,
        body,
    )


def grouped_bars(
    *,
    slug: str,
    title: str,
    desc: str,
    categories: list[str],
    series: list[Series],
    height: int = 220,
) -> SafeString:
    """Vertical bars, one group per category and one bar per series, with the value on top
    of each bar, a legend and the axis top."""
    top = _nice_max(max((v for s in series for v in s.values), default=0))
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = height - TOP - BOTTOM
    group_w = plot_w / max(len(categories), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    parts: list[SafeString] = [
        format_html(
            '<line class="chart-axis" x1="{}" y1="{}" x2="{}" y2="{}"/>'
            '<text class="chart-tick" x="{}" y="{}" text-anchor="end">{}</text>'
            '<text class="chart-tick" x="{}" y="{}" text-anchor="end">0</text>',
            LEFT,
            TOP + plot_h,
            WIDTH - RIGHT,
            TOP + plot_h,
            LEFT - 4,
            TOP + 4,
            top,
            LEFT - 4,
            TOP + plot_h,
        ),
        format_html(
            '<line class="chart-grid" x1="{}" y1="{}" x2="{}" y2="{}"/>',
            LEFT,
            TOP,
            WIDTH - RIGHT,
            TOP,
        ),
    ]
    for index, category in enumerate(categories):
        x0 = LEFT + index * group_w + group_w * 0.1
        for position, one in enumerate(series):
            value = one.values[index] if index < len(one.values) else 0
            bar_h = plot_h * value / top
            x = x0 + position * bar_w
            y = TOP + plot_h - bar_h
            parts.append(
                format_html(
                    '<rect class="chart-bar {}" x="{}" y="{}" width="{}" '
                    'height="{}"><title>{}: {} {}</title></rect>'
                    '<text class="chart-value" x="{}" y="{}" '
                    'text-anchor="middle">{}</text>',
                    one.css,
                    _n(x),
                    _n(y),
                    _n(max(bar_w - 2, 1)),
                    _n(bar_h),
                    category,
                    value,
                    one.name,
                    _n(x + bar_w / 2 - 1),
                    _n(y - 3),
                    value,
                )
            )
        parts.append(
            format_html(
                '<text class="chart-label" x="{}" y="{}" text-anchor="middle">{}</text>',
                _n(LEFT + index * group_w + group_w / 2),
                TOP + plot_h + 14,
                category,
            )
        )
    legend_x = LEFT
    for one in series:
        parts.append(
            format_html(
                '<rect class="chart-bar {}" x="{}" y="{}" width="10" height="10"/>'
                '<text class="chart-label" x="{}" y="{}">{}</text>',
                one.css,
                legend_x,
                height - 12,
                legend_x + 14,
                height - 3,
                one.name,
            )
        )
        legend_x += 24 + 7 * len(one.name)
    # Every part is format_html's output: escaped already.
    body = mark_safe("".join(parts))
    return _frame(slug=slug, title=title, desc=desc, height=height, body=body)


def horizontal_bars(
    *, slug: str, title: str, desc: str, rows: list[tuple[str, int, str]]
) -> SafeString:
    """One labelled horizontal bar per `(label, value, css)` row, the value at its end."""
    label_w, row_h = 150, 26
    height = TOP + row_h * len(rows) + 6
    top = _nice_max(max((value for _, value, _ in rows), default=0))
    plot_w = WIDTH - label_w - 48
    body = format_html_join(
        "",
        '<text class="chart-label" x="{}" y="{}" text-anchor="end">{}</text>'
        '<rect class="chart-bar {}" x="{}" y="{}" width="{}" height="{}">'
        "<title>{}: {}</title></rect>"
        '<text class="chart-value" x="{}" y="{}">{}</text>',
        (
            (
                label_w - 8,
                TOP + i * row_h + 13,
                label,
                css,
                label_w,
                TOP + i * row_h,
                _n(plot_w * value / top),
                row_h - 8,
                label,
                value,
                _n(label_w + plot_w * value / top + 4),
                TOP + i * row_h + 13,
                value,
            )
            for i, (label, value, css) in enumerate(rows)
        ),
    )
    return _frame(slug=slug, title=title, desc=desc, height=height, body=body)
