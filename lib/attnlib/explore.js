/* attnlib.explore: one interactive attention figure. Inlined by attnlib/explore.py after its JSON data.
   Finds its own container through document.currentScript (no element ids), reads the raw scores S = Q K^T,
   and computes P = softmax(S / (sqrt(d_k) * tau) + M) itself whenever a control changes.
   Keyboard: the heatmap is an ARIA grid with one tab stop (roving tabindex; arrows, Home/End, Ctrl+Home/End,
   Enter or Space picks the row's query); the query tokens are a listbox with one tab stop. The readout is a
   polite live region; the weights table inside <details> follows every control. */
(function (script) {
  "use strict";
  var root = script && script.parentElement;
  if (!root || !root.classList.contains("attnlib-explore")) {
    // Some front ends run the script detached from its place: take the first figure not drawn yet.
    root = document.querySelector(".attnlib-explore:not([data-ax-ready])");
  }
  if (!root || root.hasAttribute("data-ax-ready")) return;
  var source = root.querySelector('script[type="application/json"]');
  if (!source) return;
  var data = JSON.parse(source.textContent);
  root.setAttribute("data-ax-ready", "1");
  root.setAttribute("role", "group");
  root.setAttribute("aria-label", "interactive attention figure" + (data.title ? ": " + data.title : ""));

  var SVG = "http://www.w3.org/2000/svg";
  var T = data.T, st = data.state, labels = data.labels;
  var fallback = root.querySelector(".ax-fallback");
  if (fallback) fallback.parentNode.removeChild(fallback);

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function name(i) { return i + ":" + labels[i]; }
  // The same words as _label and _caption in explore.py.
  function label() {
    var which = data.L > 1 ? " of " + data.layerLabel + " " + st.layer + " head " + st.head :
      (data.h > 1 ? " of head " + st.head : "");
    return "attention weights" + which + " over " + T + " tokens";
  }
  function caption() {
    var parts = [label()];
    if (data.controls.scale) parts.push(st.scaled ? "divided by \u221Ad_k" : "not divided by \u221Ad_k");
    if (data.controls.mask) parts.push(st.causal ? "causal mask on" : "causal mask off");
    if (data.controls.temperature) parts.push("temperature \u03C4 = " + st.temperature.toFixed(2));
    var text = parts.join(", ") + ". Rows: queries i; columns: keys j; 3 decimals";
    return text + (st.causal ? "; \u2014: a future key, masked (weight 0)." : ".");
  }

  // ------------------------------------------------------------------------------------------ the numbers
  function weights() {
    var S = data.S[st.layer][st.head], P = [];
    var div = (st.scaled ? Math.sqrt(data.d_k) : 1) * st.temperature;
    for (var i = 0; i < T; i++) {
      var row = [], top = -Infinity, j;
      for (j = 0; j < T; j++) {
        var z = (st.causal && j > i) ? -Infinity : S[i][j] / div;
        row.push(z);
        if (z > top) top = z;
      }
      var sum = 0;
      for (j = 0; j < T; j++) { row[j] = Math.exp(row[j] - top); sum += row[j]; }
      for (j = 0; j < T; j++) row[j] = row[j] / sum;
      P.push(row);
    }
    return P;
  }
  // Matplotlib's "Blues", five stops.
  var STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  function rgb(w) {
    var x = Math.max(0, Math.min(1, w)) * (STOPS.length - 1), k = Math.min(Math.floor(x), STOPS.length - 2);
    var f = x - k, a = STOPS[k], b = STOPS[k + 1];
    return [0, 1, 2].map(function (c) { return Math.round(a[c] + f * (b[c] - a[c])); });
  }
  // WCAG relative luminance; black or white text, whichever contrasts more (at least 4.58:1 on any colour).
  function luminance(c) {
    var lin = c.map(function (v) { v = v / 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  }
  function ink(c) {
    var L = luminance(c);
    return (L + 0.05) / 0.05 >= 1.05 / (L + 0.05) ? "#000000" : "#ffffff";
  }

  // ------------------------------------------------------------------------------------------ the controls
  var help = root.querySelector(".ax-help");
  var readout = root.querySelector(".ax-readout") || el("div", "ax-readout");
  readout.setAttribute("role", "status");
  readout.setAttribute("aria-live", "polite");
  readout.setAttribute("aria-atomic", "true");
  var tableBox = root.querySelector(".ax-table-scroll");
  var table = root.querySelector(".ax-table table");
  function place(node) {
    if (help && help.parentNode === root) root.insertBefore(node, help); else root.appendChild(node);
  }
  if (data.title) place(el("div", "ax-title", data.title));
  var bar = el("div", "ax-controls");
  place(bar);
  function menu(cls, word, n, value, onchange) {
    var lab = el("label", "ax-control"), sel = el("select", cls);
    lab.appendChild(document.createTextNode(word + " "));
    for (var k = 0; k < n; k++) {
      var o = el("option", null, String(k));
      o.value = String(k);
      sel.appendChild(o);
    }
    sel.value = String(value);
    sel.addEventListener("change", function () { onchange(parseInt(sel.value, 10)); draw(); });
    lab.appendChild(sel);
    bar.appendChild(lab);
  }
  function toggle(cls, text, value, onchange) {
    var lab = el("label", "ax-control"), box = el("input", cls);
    box.type = "checkbox";
    box.checked = value;
    box.addEventListener("change", function () { onchange(box.checked); draw(); });
    lab.appendChild(box);
    lab.appendChild(document.createTextNode(" " + text));
    bar.appendChild(lab);
  }
  if (data.L > 1) menu("ax-layer", data.layerLabel, data.L, st.layer, function (v) { st.layer = v; });
  if (data.h > 1) menu("ax-head", "head", data.h, st.head, function (v) { st.head = v; });
  if (data.controls.scale) {
    toggle("ax-scale", "divide by \u221Ad_k (d_k = " + data.d_k + ")", st.scaled, function (v) { st.scaled = v; });
  }
  if (data.controls.mask) toggle("ax-mask", "causal mask M", st.causal, function (v) { st.causal = v; });
  if (data.controls.temperature) {
    var tl = el("label", "ax-control"), slider = el("input", "ax-temp"), shown = el("span", "ax-temp-value");
    slider.type = "range";
    slider.min = String(data.tempRange[0]);
    slider.max = String(data.tempRange[1]);
    slider.step = String(data.tempRange[2]);
    slider.value = String(st.temperature);
    shown.textContent = st.temperature.toFixed(2);
    slider.addEventListener("input", function () {
      st.temperature = parseFloat(slider.value);
      shown.textContent = st.temperature.toFixed(2);
      draw();
    });
    tl.appendChild(document.createTextNode("temperature \u03C4 "));
    tl.appendChild(slider);
    tl.appendChild(document.createTextNode(" "));
    tl.appendChild(shown);
    bar.appendChild(tl);
  }

  // ------------------------------------------------------------------------------------------ the pictures
  var panes = el("div", "ax-panes");
  place(panes);
  var longest = 0;
  for (var t = 0; t < T; t++) longest = Math.max(longest, name(t).length);
  var cell = Math.max(12, Math.min(34, Math.floor(420 / T)));
  var font = Math.min(12, cell - 1);
  var lab = longest * font * 0.62;                     // a label's length (monospace)
  var margin = 10 + lab;
  // The last column's label, turned by 60 degrees, reaches half its length to the right of its column.
  var heatW = Math.ceil(margin + (T - 0.5) * cell + 0.5 * lab + font + 4), heatH = Math.ceil(margin + T * cell + 6);
  var heatBox = el("div", "ax-heat");
  panes.appendChild(heatBox);
  // tabindex -1 on each <svg>: Chromium would make the picture itself one more tab stop.
  var heat = svg("svg", {"class": "ax-heatmap", width: heatW, height: heatH,
                         viewBox: "0 0 " + heatW + " " + heatH, role: "grid", "aria-label": label(), tabindex: -1,
                         "aria-rowcount": T, "aria-colcount": T}, heatBox);
  var axes = svg("g", {"aria-hidden": "true"}, heat);
  var cells = [], texts = [];
  for (var i = 0; i < T; i++) {
    svg("text", {x: margin - 4, y: margin + (i + 0.5) * cell, "text-anchor": "end",
                 "dominant-baseline": "central", "font-size": font, "class": "ax-row-label"}, axes)
      .textContent = name(i);
    var cx = margin + (i + 0.5) * cell;
    svg("text", {x: cx, y: margin - 4, "text-anchor": "start", "font-size": font, "class": "ax-col-label",
                 transform: "rotate(-60 " + cx + " " + (margin - 4) + ")"}, axes).textContent = name(i);
  }
  for (i = 0; i < T; i++) {
    var rowG = svg("g", {role: "row", "aria-rowindex": i + 1, "aria-label": "query " + name(i)}, heat);
    var row = [], trow = [];
    for (var j = 0; j < T; j++) {
      var r = svg("rect", {x: margin + j * cell, y: margin + i * cell, width: cell - 1, height: cell - 1,
                           "class": "ax-cell", "data-i": i, "data-j": j, role: "gridcell", tabindex: -1,
                           "aria-colindex": j + 1, "aria-label": "key " + name(j)}, rowG);
      row.push(r);
    }
    cells.push(row);
  }
  if (T <= 10) {
    var numbers = svg("g", {"aria-hidden": "true"}, heat);
    for (i = 0; i < T; i++) {
      var trow2 = [];
      for (j = 0; j < T; j++) {
        trow2.push(svg("text", {x: margin + (j + 0.5) * cell, y: margin + (i + 0.5) * cell, "text-anchor": "middle",
                                "dominant-baseline": "central", "font-size": Math.min(10, font),
                                "class": "ax-cell-text"}, numbers));
      }
      texts.push(trow2);
    }
  }
  // The frame around the cell that is read: dark outside, white inside, visible on light and dark cells.
  var frame = svg("g", {"class": "ax-focus", visibility: "hidden", "aria-hidden": "true"}, heat);
  svg("rect", {"class": "ax-focus-out", x: -1.5, y: -1.5, width: cell + 2, height: cell + 2, fill: "none"}, frame);
  svg("rect", {"class": "ax-focus-in", x: 0.5, y: 0.5, width: cell - 2, height: cell - 2, fill: "none"}, frame);

  var rowH = Math.max(14, Math.min(24, Math.floor(440 / T)));
  var tokW = 12 + longest * 7.3, tvW = Math.ceil(2 * tokW + 110), tvH = T * rowH + 10;
  var view = svg("svg", {"class": "ax-tokens", width: tvW, height: tvH, viewBox: "0 0 " + tvW + " " + tvH,
                         role: "listbox", "aria-orientation": "vertical", "aria-label": "", tabindex: -1});
  panes.appendChild(readout);
  panes.appendChild(view);
  var deco = svg("g", {"aria-hidden": "true"}, view);
  var qframe = svg("rect", {"class": "ax-qframe", x: 2, width: tokW, height: rowH, fill: "none",
                            visibility: "hidden"}, deco);
  var lines = svg("g", {"class": "ax-lines"}, deco);
  var qTok = [], kTok = [];
  for (var p = 0; p < T; p++) {
    var y = 5 + (p + 0.5) * rowH;
    var q = svg("text", {x: tokW, y: y, "text-anchor": "end", "dominant-baseline": "central",
                         "class": "ax-query", "data-i": p, "font-size": 12, role: "option", tabindex: -1,
                         "aria-selected": "false", "aria-label": "query " + name(p)}, view);
    q.textContent = name(p);
    var k = svg("text", {x: tokW + 110, y: y, "text-anchor": "start", "dominant-baseline": "central",
                         "class": "ax-key", "data-j": p, "font-size": 12}, deco);
    k.textContent = name(p);
    qTok.push(q);
    kTok.push(k);
  }
  var tdRows = table ? Array.prototype.slice.call(table.tBodies[0].rows).map(function (tr) {
    return Array.prototype.slice.call(tr.cells, 1);
  }) : [];

  // ------------------------------------------------------------------------------------------ the layout
  // Side by side where both pictures fit; else one column, the readout under the heatmap (sticky: it stays on
  // screen while the reader taps the tokens below). The pictures scale down to the card (CSS max-width).
  function fit() {
    var cs = getComputedStyle(root);
    var inner = root.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    if (inner > 0) root.classList.toggle("ax-narrow", inner < heatW + 24 + tvW);
  }
  fit();
  if (window.ResizeObserver) new ResizeObserver(fit).observe(root);
  else window.addEventListener("resize", fit);

  // ------------------------------------------------------------------------------------------ drawing
  var P = null, focus = {i: st.query, j: null};
  var at = {i: st.query, j: 0}, atQuery = st.query;  // the one cell and the one token that take the Tab key
  var inHeat = false, inView = false;
  function say(text) { if (readout.textContent !== text) readout.textContent = text; }
  function describe() {
    var i = focus.i, j = focus.j;
    if (j === null) {
      var best = 0;
      for (var c = 1; c < T; c++) if (P[i][c] > P[i][best]) best = c;
      say("query " + name(i) + " reads " + (st.causal ? i + 1 : T) + " keys; largest weight " +
          P[i][best].toFixed(3) + " on key " + name(best));
    } else if (st.causal && j > i) {
      say("query " + name(i) + " \u2192 key " + name(j) + ": masked (a future key), weight 0");
    } else {
      say("query " + name(i) + " \u2192 key " + name(j) + ": weight " + P[i][j].toFixed(3));
    }
  }
  function roving() {
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) cells[i][j].setAttribute("tabindex", i === at.i && j === at.j ? "0" : "-1");
      qTok[i].setAttribute("tabindex", i === atQuery ? "0" : "-1");
    }
  }
  function drawLines() {
    while (lines.firstChild) lines.removeChild(lines.firstChild);
    var i = focus.i, y0 = 5 + (i + 0.5) * rowH;
    for (var j = 0; j < T; j++) {
      var w = P[i][j];
      if (!(w > 0)) continue;
      var ln = svg("line", {x1: tokW + 4, y1: y0, x2: tokW + 106, y2: 5 + (j + 0.5) * rowH, "class": "ax-line",
                            "stroke-width": (1 + 5 * w).toFixed(2), "stroke-opacity": Math.max(0.04, w).toFixed(3),
                            "data-j": j}, lines);
      if (focus.j === j) ln.setAttribute("class", "ax-line ax-line-on");
    }
    for (var t2 = 0; t2 < T; t2++) {
      qTok[t2].setAttribute("class", t2 === i ? "ax-query ax-on" : "ax-query");
      qTok[t2].setAttribute("aria-selected", t2 === i ? "true" : "false");
      kTok[t2].setAttribute("class", (st.causal && t2 > i) ? "ax-key ax-off" : "ax-key");
    }
    view.setAttribute("aria-label", "query tokens; lines from query " + name(i) +
                      " to the keys it reads, as strong as the weight");
    var fi = inHeat ? at.i : focus.i, fj = inHeat ? at.j : focus.j;
    if (fj === null) {
      frame.setAttribute("visibility", "hidden");
    } else {
      frame.setAttribute("transform", "translate(" + (margin + fj * cell) + " " + (margin + fi * cell) + ")");
      frame.setAttribute("visibility", "visible");
    }
    qframe.setAttribute("y", 5 + atQuery * rowH);
    qframe.setAttribute("visibility", inView ? "visible" : "hidden");
    describe();
  }
  function draw() {
    P = weights();
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) {
        var masked = st.causal && j > i, c = rgb(P[i][j]);
        cells[i][j].style.fill = masked ? "#c8c8c8" : "rgb(" + c.join(",") + ")";
        cells[i][j].setAttribute("class", masked ? "ax-cell ax-masked" : "ax-cell");
        if (texts.length) {
          texts[i][j].textContent = masked ? "" : P[i][j].toFixed(2);
          texts[i][j].style.fill = ink(c);
        }
        if (tdRows.length) {
          var v = masked ? "\u2014" : P[i][j].toFixed(3);
          if (tdRows[i][j].textContent !== v) tdRows[i][j].textContent = v;
        }
      }
    }
    heat.setAttribute("aria-label", label());
    if (table && table.caption) table.caption.textContent = caption();
    if (tableBox) tableBox.setAttribute("aria-label", label());
    drawLines();
  }
  function index(e, what) { return parseInt(e.getAttribute(what), 10); }
  function isCell(e) { return e && e.classList && e.classList.contains("ax-cell"); }
  function isQuery(e) { return e && e.classList && e.classList.contains("ax-query"); }

  // The pointer: hovering reads a cell or a query; a click or a tap also moves the tab stop there.
  heat.addEventListener("mouseover", function (ev) {
    if (!isCell(ev.target)) return;
    focus = {i: index(ev.target, "data-i"), j: index(ev.target, "data-j")};
    drawLines();
  });
  view.addEventListener("mouseover", function (ev) {
    if (!isQuery(ev.target)) return;
    focus = {i: index(ev.target, "data-i"), j: null};
    drawLines();
  });
  heat.addEventListener("click", function (ev) {
    if (!isCell(ev.target)) return;
    at = {i: index(ev.target, "data-i"), j: index(ev.target, "data-j")};
    focus = {i: at.i, j: at.j};
    roving();
    drawLines();
  });
  view.addEventListener("click", function (ev) {
    if (!isQuery(ev.target)) return;
    atQuery = index(ev.target, "data-i");
    focus = {i: atQuery, j: null};
    roving();
    drawLines();
  });

  // The keyboard: focus reads what it lands on.
  heat.addEventListener("focusin", function (ev) {
    if (!isCell(ev.target)) return;
    inHeat = true;
    at = {i: index(ev.target, "data-i"), j: index(ev.target, "data-j")};
    focus = {i: at.i, j: at.j};
    roving();
    drawLines();
  });
  heat.addEventListener("focusout", function () { inHeat = false; drawLines(); });
  heat.addEventListener("keydown", function (ev) {
    if (!isCell(ev.target)) return;
    var i = at.i, j = at.j, key = ev.key;
    if (key === "ArrowRight") j = Math.min(T - 1, j + 1);
    else if (key === "ArrowLeft") j = Math.max(0, j - 1);
    else if (key === "ArrowDown") i = Math.min(T - 1, i + 1);
    else if (key === "ArrowUp") i = Math.max(0, i - 1);
    else if (key === "Home") { j = 0; if (ev.ctrlKey) i = 0; }
    else if (key === "End") { j = T - 1; if (ev.ctrlKey) i = T - 1; }
    else if (key === "PageUp") i = 0;
    else if (key === "PageDown") i = T - 1;
    else if (key === "Enter" || key === " " || key === "Spacebar") {
      ev.preventDefault();
      atQuery = at.i;
      focus = {i: at.i, j: null};
      roving();
      drawLines();
      return;
    } else return;
    ev.preventDefault();
    at = {i: i, j: j};
    roving();
    cells[i][j].focus();
    focus = {i: i, j: j};
    drawLines();
  });
  view.addEventListener("focusin", function (ev) {
    if (!isQuery(ev.target)) return;
    inView = true;
    atQuery = index(ev.target, "data-i");
    focus = {i: atQuery, j: null};
    roving();
    drawLines();
  });
  view.addEventListener("focusout", function () { inView = false; drawLines(); });
  view.addEventListener("keydown", function (ev) {
    if (!isQuery(ev.target)) return;
    var i = atQuery, key = ev.key;
    if (key === "ArrowDown" || key === "ArrowRight") i = Math.min(T - 1, i + 1);
    else if (key === "ArrowUp" || key === "ArrowLeft") i = Math.max(0, i - 1);
    else if (key === "Home") i = 0;
    else if (key === "End") i = T - 1;
    else if (key !== "Enter" && key !== " " && key !== "Spacebar") return;
    ev.preventDefault();
    atQuery = i;
    roving();
    qTok[i].focus();
    focus = {i: i, j: null};
    drawLines();
  });
  roving();
  draw();
})(document.currentScript);
