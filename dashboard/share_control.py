"""The header's "Share live" switch (issue 48 item 1): shares the run of the lab in view
(``Lab.share``) and shows its link in large type for a projector; the switch says how many
follow; off ends the share (``Lab.unshare``).  See :mod:`boltzlab.dashboard.sharing`."""

from __future__ import annotations

from typing import Any, Callable

import panel as pn

from .views.text import escape

LINK_CSS = ("font-size: 2.6em; font-weight: bold; word-break: break-all; font-family: ui-monospace, monospace; "
            "padding: 0.3em 0; color: #1f3a5f")


def follow_link(code: str) -> str:
    """The page's own address with ``?follow=<code>`` (the browser's location)."""
    loc = pn.state.location
    if loc is None or not loc.hostname:
        return f"?follow={code}"
    port = f":{loc.port}" if loc.port and loc.port not in ("80", "443") else ""
    return f"{loc.protocol}//{loc.hostname}{port}{loc.pathname}?follow={code}"


class ShareControl:
    """The switch, and the link's panel (shown in the template's modal)."""

    def __init__(self, lab_in_view: Callable[[], Any]) -> None:
        self.lab_in_view = lab_in_view
        # (its link and what it does are said in the panel it opens)
        self.toggle = pn.widgets.Toggle(label="Share live", value=False, width=210, color="light", margin=(12, 10))
        self.link = pn.pane.HTML("", styles={"max-width": "90vw"}, sizing_mode="stretch_width")
        self.note = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.panel = pn.Column(pn.pane.Markdown("### Follow this run live"), self.link, self.note,
                               sizing_mode="stretch_width")
        self.template: Any = None
        self._lab: Any = None
        self._quiet = False
        self.toggle.param.watch(self._changed, "value")

    def _changed(self, event) -> None:
        if self._quiet:
            return
        if event.new:
            lab = self.lab_in_view()
            if lab is None:
                self._set(False)
                return
            try:
                code = lab.share()
            except ValueError as exc:
                self._set(False)
                lab.tools.show("warn", str(exc))
                return
            self._lab = lab
            lab.share_listener = self.followers
            url = follow_link(code)
            self.link.object = f'<div style="{LINK_CSS}">{escape(url)}</div>'
            self.note.object = ("Open it on a laptop or phone: the page follows this run read-only (figures, tab, "
                                "narration) and **Make it mine** forks it. Switch *Share live* off to end it.")
            self.followers(lab)
            if self.template is not None:
                self.template.open_modal()
        else:
            lab, self._lab = self._lab, None
            if lab is not None:
                lab.share_listener = None
                lab.unshare(background=True)  # (the last state is copied in a thread)
                lab.tools.show("info", "The live share ended; followers keep its last state.")
            self.toggle.label, self.toggle.color = "Share live", "light"

    def followers(self, lab: Any) -> None:
        """The switch says how many follow (the lab calls this with its status)."""
        label = f"● Sharing live · {lab.followers} following"
        if self.toggle.label != label:
            self.toggle.label, self.toggle.color = label, "danger"

    def _set(self, value: bool) -> None:
        self._quiet = True
        try:
            self.toggle.value = value
        finally:
            self._quiet = False
