"""Run the class (issue 48 item 1): a lab shares its run live (``share``, ``unshare``) and a
lab follows one (``follow``; "Make it mine" forks it).

A mixin of :class:`boltzlab.dashboard.labs.base.Lab`; the shared data, the registry and the
follower's stand-in runner are in :mod:`boltzlab.dashboard.sharing`.  A follower's page is
read-only: its sidebar is a card saying whose run it follows, with **Make it mine**; its
transport is disabled; its figures, stage tab, caption and counter are the teacher's.
"""

from __future__ import annotations

import threading
from typing import Any

import panel as pn

from .. import sharing
from .holding import graph_frozen, held
from ..labtools import setting_text
from ..views import StatusBadge
from ..views.text import LiveHTML

FOLLOW_TEXT = ("### Following a live run\n"
               "You see the teacher's run as it trains: the figures, the tab in view and the narration "
               "follow theirs. **Make it mine** keeps a copy of the run as it is now (its settings, "
               "its trained state, its history and pins) to train on your own.")


def _end(share: sharing.Share, key: str) -> None:
    """End ``share`` with a copy of its run's last state (None if it cannot be copied)."""
    try:
        final = share.checkpoint_bytes(key)
    except Exception:  # noqa: BLE001 - a run that cannot be copied leaves nothing to fork
        final = None
    share.end(final)


class Following:
    """Sharing and following of a lab (see the module's docstring)."""

    #: called with the lab at each status refresh while it shares (the page's switch counts followers)
    share_listener: Any = None

    # ------------------------------------------------------------------ the teacher's side
    @property
    def shared(self) -> str | None:
        """The code of the live share of this lab's run, or None."""
        return None if self._share is None else self._share.code

    @property
    def followers(self) -> int:
        """How many pages follow this lab's shared run."""
        return 0 if self._share is None else self._share.followers

    def share(self) -> str:
        """Share the run live with other pages of this server: return its code (96 random
        bits); ``…/<lab>?follow=<code>`` opens a read-only page that follows the run.  Again:
        the same code.  ``ValueError`` on a page that follows, or a run on uploaded data
        (followers have not got them)."""
        owner = f"{type(self).__name__}.share"
        if self._following is not None:
            raise ValueError(f"{owner}: this page follows a shared run; press Make it mine first.")
        if self._trains_on_upload():
            raise ValueError(f"{owner}: the run trains on uploaded data, which followers have not got; "
                             "share a run on one of the lab's data sets.")
        if self._share is None:
            self._share = sharing.open_share(self.key)
            self._share_restart()
            self._share.set_pins(list(self._pins))
        return self._share.code

    def _trains_on_upload(self) -> bool:
        """The run trains on a user's upload, which followers have not got.  (TAP and
        Frank-Wolfe report the identity of a built-in data set too, for checkpoints: those
        are shared, the followers load the same set from the settings.)"""
        if self.data_identity() is None:
            return False
        uploads = getattr(self, "uploads", None)
        images = getattr(uploads, "run_images", None)
        return images is None or getattr(images, "origin", None) == "user upload"

    def unshare(self, *, background: bool = False) -> None:
        """End the live share: no one new may follow; followers are told, and keep the last
        state to fork, once it is copied (a TAP run: ~25 ms).  ``background``: copy it in a
        thread (a click handler does not wait for it)."""
        share, self._share = self._share, None
        if share is None:
            return
        share.withdraw()
        if background:
            threading.Thread(target=_end, args=(share, self.key), name="boltzlab-unshare", daemon=True).start()
        else:
            _end(share, self.key)

    def _share_restart(self) -> None:
        """A new run (or the share's first): followers take its settings and history."""
        share = self._share
        if share is None:
            return
        sweep = self.sweeping
        share.restart(settings={n: setting_text(v) for n, v in self.run_settings().items()},
                      sweep=(sweep[0], [setting_text(v) for v in sweep[1]]) if sweep is not None else None,
                      names=list(self.runner.names), history=self.runner.drawn_history(), runner=self.runner,
                      data=self.data_identity())

    def _share_publish(self, records: list) -> None:
        """What this tick drew, for the followers (a replay of a loaded history is not new)."""
        if self._share is None or self._replaying:
            return
        tabs = getattr(self, "stage_tabs", None)
        self._share.publish(records, states=self.runner.states, playing=self.runner.playing,
                            view={"tab": None if tabs is None else self._stage_labels[tabs.active],
                                  "caption": self.tools.changed.object, "counter": self.counter(),
                                  "lesson": self.lesson_tools.caption.object})

    # ------------------------------------------------------------------ the follower's side
    @property
    def following(self) -> str | None:
        """The code of the shared run this lab follows, or None."""
        return None if self._following is None else self._following.code

    def follow(self, code: str) -> None:
        """Follow the run shared under ``code`` (read-only) until :meth:`make_mine` or
        :meth:`unfollow`.  ``ValueError`` for a code no live share has."""
        share = sharing.find(code, self.key)
        if self._share is not None:
            self.unshare()
        if self._following is not None:
            self.unfollow()
        self.runner.pause()
        self._following = share
        self.runner = sharing.Mirror(self.runner, share)
        share.join(id(self))
        self._pins_seen = -1
        self._follow_view(True)
        self._retime()
        self._sync_follow()

    def unfollow(self) -> None:
        """Stop following: the page holds its own run again (as it was before following)."""
        share, self._following = self._following, None
        if share is None:
            return
        share.leave(id(self))
        self.runner = self.runner.own
        self._follow_view(False)
        self._retime()
        self._restart_views()
        self.redraw(self.runner.history.records())

    def make_mine(self) -> None:
        """Fork the followed run (a copy of the teacher's trainers between two steps, the
        teacher plays on) into this page's own run; it then trains on its own.  Runs as a
        job: the page says when it is done."""
        share = self._following
        if share is None:
            raise ValueError(f"{type(self).__name__}.make_mine: this page follows no shared run.")
        self.follow_status.set("info", "Copying the run…")
        # in this process: it copies the teacher's runner, which is here
        self.jobs.submit("fork", share.checkpoint_bytes, self.key, then=self._forked, error=self._fork_failed,
                         here=True)

    @held
    def _on_mine(self) -> None:
        try:
            self.make_mine()
        except ValueError as exc:
            self.follow_status.set("error", str(exc))

    def _forked(self, content: bytes) -> None:
        share, self._following = self._following, None
        if share is not None:
            share.leave(id(self))
            self.runner = self.runner.own
        self._follow_view(False)
        self._retime()
        if self.tools.load_bytes(content, filename="the shared run"):
            self.tools.show("ok", "The run is yours now: press ▶ Play to train it on your own.")

    def _fork_failed(self, exc: BaseException) -> None:
        self.follow_status.set("error", f"Could not copy the run: {exc}")

    def _sync_follow(self) -> None:
        """Each tick of a follower, before it drains: a new run at the teacher (replayed from
        its history), the pins, the tab, the caption, and the end of the share."""
        share, mirror = self._following, self.runner
        if share.generation != mirror.generation_seen:
            generation, seq, history, _ = share.start()
            values, _ = self.tools.decode(share.settings, strict=False)
            try:
                sweep = self.tools._sweep_values(share.sweep)
                if values != self.run_settings() or sweep != self.sweeping:
                    self.apply_settings(values, sweep=sweep)
            except ValueError as exc:
                self.follow_status.set("error", f"This page cannot show the teacher's run: {exc}")
            mirror.generation_seen, mirror.seq = generation, seq
            self._replay(history.records())
        if share.pins_version != self._pins_seen:
            self._pins_seen = share.pins_version
            self.load_pins(list(share.pins))
        view = share.view
        tabs = getattr(self, "stage_tabs", None)
        if tabs is not None and view.get("tab") in self._stage_labels:
            index = self._stage_labels.index(view["tab"])
            if tabs.active != index:
                tabs.active = index
        if "caption" in view and self.tools.changed.object != view["caption"]:
            self.tools.changed.object = view["caption"]
        lesson = view.get("lesson") or ""  # the teacher's lesson step (built from escaped parts)
        if self.follow_lesson.object != lesson:
            self.follow_lesson.param.update(object=lesson, visible=bool(lesson))
        if share.ended:
            self.follow_status.set("warn", "The teacher ended the share: this is its last state. "
                                           "Make it mine keeps it.")
        else:
            self.follow_status.set("ok", f"Live: {'playing' if share.playing else 'paused'} "
                                         f"({share.followers} following).")

    def _replay(self, records: list) -> None:
        """Clear the views and draw ``records`` (what a follower joining late has missed);
        the analyses follow on later ticks, as while playing (never waited for here)."""
        # one walk of the page's model graph, not one per legend and layer redrawn
        with pn.io.hold(), graph_frozen(pn.state.curdoc):
            self._restart_views()
            self._replaying = True
            try:
                self.on_records(records)
            finally:
                self._replaying = False

    def _follow_view(self, on: bool) -> None:
        """The page as a follower (read-only, the follow card in the sidebar) or its own."""
        left = getattr(self, "_left", None)
        if left is not None:
            if on:
                self._own_controls = list(left.objects)
                left.objects = [self._follow_card]
            elif self._own_controls is not None:
                left.objects = self._own_controls
        for widget in (self.play_button, self.pause_button, self.step, self.reset, self.pin_button, self.widgets["speed"],
                       self.tools.next_step):
            widget.disabled = on
        if not on:
            self.refresh_status()

    def _build_follow_card(self) -> None:
        self.mine_button = pn.widgets.Button(label="Make it mine", color="primary", width=160)
        self.mine_button.on_click(lambda event: self._on_mine())
        self.follow_status = StatusBadge("", "info", name=f"{self.key}-follow-status")
        self.follow_lesson = LiveHTML("", visible=False, sizing_mode="stretch_width", name=f"{self.key}-follow-lesson",
                                      css_classes=[f"{self.key}-follow-lesson"],
                                      styles={"font-size": "1.1em"})
        self._follow_card = pn.Column(pn.pane.Markdown(FOLLOW_TEXT), self.mine_button, self.follow_status.pane,
                                      self.follow_lesson,
                                      sizing_mode="stretch_width", css_classes=["follow-card"])
        self._own_controls: list[Any] | None = None
