"""Text panes made cheap for the server's event loop: fixed text rendered once per process
(:class:`StaticMarkdown`), and text a lab changes at every status refresh sent alone
(:class:`LiveHTML`, :func:`html_table`)."""

from __future__ import annotations

import html
from typing import Any, ClassVar, Sequence

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
        rendered = self._html.get(key)
        if rendered is None:
            rendered = self._html[key] = super()._transform_object(obj)
        return dict(rendered)


#: the cell rules of Panel's markdown.css, which a Markdown pane's tables had
TABLE_CSS = "table, th, td { border: 1px solid; border-collapse: collapse; padding: 5px; }"


class LiveHTML(pn.pane.HTML):
    """An HTML pane whose changes of ``object`` update only its model's text: for the step
    counter, status badges and a race's table, which change at every status refresh.

    Panel updates a pane's text by recomputing every property of its model, its stylesheets
    included: three Bokeh models are built at each change only to compare equal to the ones
    the browser has.  A counter's change took 0.8–1.4 ms of the server's event loop here, a
    tenth of that as a LiveHTML; a race's 6-row Markdown table 2.4–3.0 ms, 0.2–0.3 ms as
    :func:`html_table` in a LiveHTML.  With 16 sessions playing and ~3 status refreshes a
    second each, those changes were a tenth of the loop (session 13's profile of FVBM 16:
    9 % in the status texts' Markdown).

    Its other parameters (styles, visibility, size, ...) update as any pane's do; only the
    change of the object skips Panel's recomputation of the stylesheets, which do not
    depend on it.
    """

    def _update(self, ref: str, model: Any) -> None:
        model.update(text=self._transform_object(self.object)["object"])


def html_table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]], caption: str = "") -> str:
    """An HTML table: ``columns`` are (title, alignment: "", "left", "right" or "center"),
    ``rows`` the cells (escaped), ``caption`` HTML put above the table."""

    def cell(tag: str, text: Any, align: str) -> str:
        style = f' style="text-align:{align}"' if align else ""
        return f"<{tag}{style}>{html.escape(str(text))}</{tag}>"

    head = "".join(cell("th", title, align) for title, align in columns)
    body = "".join("<tr>" + "".join(cell("td", text, align) for text, (_, align) in zip(row, columns)) + "</tr>"
                   for row in rows)
    top = f"<p>{caption}</p>" if caption else ""
    return f"{top}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
