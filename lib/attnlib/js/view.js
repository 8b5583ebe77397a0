// view: the attention view every figure shares, put together from the modules below it (layout, paint, table,
// keys). The heatmap is an ARIA grid with one tab stop (roving tabindex; arrows, Home/End, Ctrl+Home/End, Enter or
// Space picks the row's query), the query tokens are a listbox with one tab stop, the readout is a polite live
// region, and the weights table inside <details> follows every change.
// o: L, h, layerLabel, st ({layer, head, causal, query}), words (data.words), bar (where the block and head menus
// go), weights() → P (T × T) for st.layer and st.head, caption(label) → the table's caption, onSelect() after a
// menu; the live figure adds minCell, lazyTable, room and canvas.
// v, the one object the modules share: what the view shows (T, labels, P), its elements, its sizes (layout), the
// cell and token that are read (keys); each module keeps the rest to itself.
kit.attentionView = function (root, o) {
  var st = o.st, W = o.words, el = kit.el, svg = kit.svg, menus = {};
  var v = {o: o, st: st, W: W, root: root, T: 0, labels: [], P: null};
  v.name = function (i) { return i + ":" + v.labels[i]; };
  // The same words as _label in explore.py.
  v.label = function () {
    var which = o.L > 1 ? kit.fmt(W.ofLayer, {layerLabel: o.layerLabel, layer: st.layer + 1, head: st.head}) :
      (o.h > 1 ? kit.fmt(W.ofHead, {head: st.head}) : "");
    return kit.fmt(W.label, {which: which, T: v.T});
  };
  function menu(cls, word, n, key) {
    var lab = el("label", "ax-control"), sel = el("select", cls);
    lab.appendChild(document.createTextNode(word + " "));
    for (var k = 0; k < n; k++) {
      var opt = el("option", null, String(key === "layer" ? k + 1 : k));   // blocks are numbered 1 … L
      opt.value = String(k);
      sel.appendChild(opt);
    }
    sel.value = String(st[key]);
    sel.addEventListener("change", function () { st[key] = parseInt(sel.value, 10); v.draw(); if (o.onSelect) o.onSelect(); });
    lab.appendChild(sel);
    o.bar.appendChild(lab);
    menus[key] = sel;
  }
  if (o.L > 1) menu("ax-layer", o.layerLabel, o.L, "layer");
  if (o.h > 1) menu("ax-head", W.head, o.h, "head");

  var readout = v.readout = root.querySelector(".ax-readout") || el("div", "ax-readout");
  readout.setAttribute("role", "status");
  readout.setAttribute("aria-live", "polite");
  readout.setAttribute("aria-atomic", "true");
  var panes = el("div", "ax-panes"), heatBox = el("div", "ax-heat");
  kit.place(root, panes);
  panes.appendChild(heatBox);
  // tabindex -1 on each <svg>: Chromium would make the picture itself one more tab stop.
  // o.canvas: the heatmap and its canvas share one box (the canvas behind, stretched to the picture).
  v.stack = heatBox;
  v.paper = null;
  if (o.canvas) {
    v.stack = el("div", "ax-stack");
    v.paper = el("canvas", "ax-colours");
    v.paper.setAttribute("aria-hidden", "true");
    v.stack.appendChild(v.paper);
    heatBox.appendChild(v.stack);
  }
  v.heat = svg("svg", {"class": "ax-heatmap", role: "grid", tabindex: -1}, v.stack);
  // ... and the labels and the focus frame on a picture of their own, over the cells: what changes as the reader
  // types is then the canvas and this small picture, never the picture of the cells.
  v.over = v.paper ? svg("svg", {"class": "ax-heat-over", "aria-hidden": "true"}, v.stack) : v.heat;
  v.list = svg("svg", {"class": "ax-tokens", role: "listbox", "aria-orientation": "vertical", tabindex: -1});
  panes.appendChild(readout);
  panes.appendChild(v.list);

  kit.layout(v);
  kit.paint(v);
  kit.table(v);
  kit.keys(v);
  // Pick a block and a head from outside (the live figure's overview of every head).
  function select(layer, head) {
    st.layer = layer;
    st.head = head;
    if (menus.layer) menus.layer.value = String(layer);
    if (menus.head) menus.head.value = String(head);
    v.draw();
  }
  return {build: v.build, draw: v.draw, select: select, label: v.label};
};
