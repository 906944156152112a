"""What an empty figure says ("Press ▶ Play to start", "Computing…", an error), in the figure
itself: one Bokeh Label in screen units, shown while there is nothing to draw."""

from __future__ import annotations

from typing import Any


class Placeholder:
    """The text ``fig`` shows while it has nothing to draw: :meth:`say` a text (shown until
    the view draws), :meth:`hide` it, :meth:`reset` to the view's own text."""

    def __init__(self, fig: Any, text: str) -> None:
        from bokeh.models import Label

        self.default = text
        self.label = Label(x=10, y=10, x_units="screen", y_units="screen", text=text,
                           text_color="#888", text_font_size="12pt")
        fig.add_layout(self.label)

    @property
    def text(self) -> str:
        return self.label.text

    @property
    def shown(self) -> bool:
        return bool(self.label.visible)

    def say(self, text: str) -> None:
        """Show ``text`` (until :meth:`hide`, which drawing calls)."""
        self.label.text = text
        self.label.visible = True

    def show(self) -> None:
        self.label.visible = True

    def hide(self) -> None:
        if self.label.visible:
            self.label.visible = False

    def reset(self, text: str | None = None) -> None:
        """Back to the view's own text (or a new one, from now on: ``text``), shown."""
        if text is not None:
            self.default = text
        self.say(self.default)
