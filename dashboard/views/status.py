"""A status indicator: a coloured box with a short text (``**bold**`` and line breaks allowed;
any other markup shows as typed: see :func:`boltzlab.dashboard.views.text.text_html`)."""

from __future__ import annotations

import html
import re

import panel as pn

from .text import LiveHTML, text_html

LEVELS = {  # background, border, text
    "ok": ("#e6f4ea", "#34a853", "#1e4620"),
    "info": ("#e8f0fe", "#4285f4", "#174ea6"),
    "warn": ("#fef7e0", "#f9ab00", "#7a4f01"),
    "error": ("#fce8e6", "#d93025", "#8c1d18"),
    "idle": ("#f1f3f4", "#9aa0a6", "#3c4043"),
}


class StatusBadge:
    """``set("ok", "Monotone so far")`` turns it green, ``"error"`` red, and so on."""

    def __init__(self, text: str = "", level: str = "idle", name: str | None = None,
                 one_line: bool = False, **kwargs) -> None:
        kwargs.setdefault("sizing_mode", "stretch_width" if "width" not in kwargs else None)
        self.pane = LiveHTML("", name=name or "status", margin=(4, 5), **kwargs)
        self.one_line = one_line  # one line, cut with "…"; the whole text on hover
        self.level = level
        self._text = None
        self._details = ""
        self.set(level, text)

    @property
    def text(self) -> str:
        return self._text

    def set(self, level: str, text: str, details: str = "") -> None:
        """Show ``text``; optional ``details`` fold away under a "Details" toggle."""
        if level == self.level and text == self._text and details == self._details:
            return
        self.level, self._text, self._details = level, text, details
        bg, border, fg = LEVELS[level]
        more = ""
        if details:
            more = (f'<details style="margin-top:4px"><summary style="cursor:pointer">'
                    f"Details</summary>{text_html(details)}</details>")
        line = ""
        if self.one_line:
            whole = re.sub(r"\*\*(.+?)\*\*", r"\1", text) + (f"\n{details}" if details else "")
            line = (f'white-space:nowrap;overflow:hidden;text-overflow:ellipsis;" '
                    f'title="{html.escape(whole, quote=True)}')
            more = ""  # the details are in the hover text
            text = " ".join(text.split())
        self.pane.object = (
            f'<div class="status-badge status-{level}" style="background:{bg};'
            f"border-left:5px solid {border};color:{fg};padding:7px 10px;"
            f'border-radius:4px;font-size:0.95em;line-height:1.35;{line}">'
            f"{text_html(text)}{more}</div>")

    @property
    def details(self) -> str:
        return self._details
