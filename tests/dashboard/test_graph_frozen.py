"""``base.graph_frozen``: Bokeh's walk over a document's models, once and only when needed."""

from __future__ import annotations

from bokeh.document import Document
from bokeh.models import Column, Div

from boltzlab.dashboard.labs.base import graph_frozen


def _doc() -> tuple[Document, Column, list[int]]:
    doc = Document()
    root = Column(children=[Div(text="a")])
    doc.add_root(root)
    walks: list[int] = []
    recompute = doc.models.recompute
    doc.models.recompute = lambda: (walks.append(1), recompute())[1]
    return doc, root, walks


def test_changes_of_data_and_text_walk_nothing():
    doc, root, walks = _doc()
    with graph_frozen(doc):
        root.children[0].text = "b"
        root.width = 300
    assert walks == []
    with doc.models.freeze():  # Bokeh's own: a walk whatever happened
        root.children[0].text = "c"
    assert walks == [1]


def test_new_models_are_walked_once_at_the_end_and_belong_to_the_document():
    doc, root, walks = _doc()
    with graph_frozen(doc):
        for k in range(3):
            root.children = [*root.children, Div(text=str(k))]
        assert walks == []
    assert walks == [1]
    assert all(doc.get_model_by_id(child.id) is child for child in root.children)
    assert "invalidate" not in vars(doc.models)  # Bokeh's own again


def test_inside_an_outer_freeze_the_outer_one_walks():
    doc, root, walks = _doc()
    with doc.models.freeze():
        with graph_frozen(doc):
            root.children = [*root.children, Div(text="x")]
        assert walks == []
    assert walks == [1]
    with graph_frozen(doc), graph_frozen(doc):
        root.children = [*root.children, Div(text="y")]
    assert walks == [1, 1]
    with graph_frozen(None):  # no document (a notebook's lab): nothing to do
        pass
