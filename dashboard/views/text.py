"""Text that does not change, rendered once per process."""

from __future__ import annotations

from typing import Any, ClassVar

import panel as pn


class StaticMarkdown(pn.pane.Markdown):
    """A Markdown pane for fixed text (the About page, a lab's title and sentence): its HTML
    is rendered once per process, not at every page open.

    Panel renders a Markdown pane's text to HTML each time it builds the pane's model, i.e.
    for every session, on the server's event loop: the About page's tables were a tenth of
    a ``GET /`` (py-spy of 30 ``GET /`` on an idle server).  The cache is keyed by the text
    and every setting that changes the HTML, and holds only what these panes show (a few
    entries): a pane whose text changes should stay a plain ``pn.pane.Markdown``.
    """

    priority: ClassVar[float] = 0  # never Panel's own choice for a string
    _html: ClassVar[dict[tuple, dict[str, Any]]] = {}

    def _transform_object(self, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, str):
            return super()._transform_object(obj)
        key = (obj, self.dedent, self.renderer, tuple(self.extensions), self.hard_line_break,
               tuple(self.plugins), self.disable_anchors, repr(sorted(self.renderer_options.items())))
        html = self._html.get(key)
        if html is None:
            html = self._html[key] = super()._transform_object(obj)
        return dict(html)
