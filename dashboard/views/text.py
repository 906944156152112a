"""Text panes made cheap for the server's event loop: fixed text rendered once per process
(:class:`StaticMarkdown`), and text a lab changes at every status refresh sent alone
(:class:`LiveHTML`, :func:`html_table`).

**User text stays text** (issue 46): whatever a user or a file supplies (file names, CSV
headers and values, checkpoint contents, URL values, preset text, and the exception texts
that quote them) reaches the page escaped, never as HTML.  A pane that renders HTML
(``pn.pane.HTML``, :class:`LiveHTML`, a presentation caption) is built from escaped parts:
:func:`escape` around each piece of such text, :func:`text_html` for a sentence with
``**bold**`` and line breaks (what :class:`~boltzlab.dashboard.views.status.StatusBadge`
shows); :func:`html_table` escapes its cells.  A Markdown pane (``pn.pane.Markdown``,
``pn.pane.Alert``) holds the app's own text, with such text only through :func:`markdown_text`.
Bokeh's own texts (titles, axis and tick labels, legends, tooltips' ``@fields`` without
``{safe}``) are drawn as text already.
"""

from __future__ import annotations

import html
import re
from typing import Any, ClassVar, Sequence


from ..panel_compat import RenderedOnce, TextOnlyHTML


class StaticMarkdown(RenderedOnce):
    """A Markdown pane for fixed text (the About page, a lab's title and sentence): its HTML
    is rendered once per process, not at every page open.

    Panel renders a Markdown pane's text to HTML each time it builds the pane's model, i.e.
    for every session, on the server's event loop: the About page's tables were a tenth of
    a ``GET /`` (py-spy of 30 ``GET /`` on an idle server).  The cache is keyed by the text
    and every setting that changes the HTML, and holds only what these panes show (a few
    entries): a pane whose text changes should stay a plain ``pn.pane.Markdown``.
    """

    priority: ClassVar[float] = 0  # never Panel's own choice for a string


#: the cell rules of Panel's markdown.css, which a Markdown pane's tables had
TABLE_CSS = "table, th, td { border: 1px solid; border-collapse: collapse; padding: 5px; }"


class LiveHTML(TextOnlyHTML):
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
    depend on it (:class:`boltzlab.dashboard.panel_compat.TextOnlyHTML`).
    """


def escape(text: Any) -> str:
    """``text`` (any value: a file name, an exception) as HTML that shows it as typed."""
    return html.escape(str(text), quote=True)


def text_html(text: Any) -> str:
    """A sentence as HTML: escaped (:func:`escape`), then ``**bold**`` and line breaks
    rendered (enough for status lines and data panels)."""
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escape(text))
    return out.replace("  \n", "<br>").replace("\n", "<br>")


def markdown_text(text: Any) -> str:
    """``text`` for a Markdown pane, shown as typed: every ASCII punctuation mark escaped
    with a backslash (CommonMark), so it makes no HTML, link, emphasis or entity."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", str(text))


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
