/* attnlib.explore: one interactive attention figure. Inlined by attnlib/explore.py after its JSON data.
   Finds its own container through document.currentScript (no element ids), reads the raw scores S = Q K^T,
   and computes P = softmax(S / (sqrt(d_k) * tau) + M) itself whenever a control changes. */
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
  function colour(w) {
    var x = Math.max(0, Math.min(1, w)) * (STOPS.length - 1), k = Math.min(Math.floor(x), STOPS.length - 2);
    var f = x - k, a = STOPS[k], b = STOPS[k + 1];
    return "rgb(" + [0, 1, 2].map(function (c) { return Math.round(a[c] + f * (b[c] - a[c])); }).join(",") + ")";
  }

  // ------------------------------------------------------------------------------------------ the controls
  if (data.title) root.appendChild(el("div", "ax-title", data.title));
  var bar = el("div", "ax-controls");
  root.appendChild(bar);
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
  root.appendChild(panes);
  var longest = 0;
  for (var t = 0; t < T; t++) longest = Math.max(longest, name(t).length);
  var cell = Math.max(12, Math.min(34, Math.floor(420 / T)));
  var font = Math.min(12, cell - 1);
  var margin = 10 + longest * font * 0.62;
  var side = margin + T * cell + 6;
  var heat = svg("svg", {"class": "ax-heatmap", width: side, height: side,
                         viewBox: "0 0 " + side + " " + side, role: "img",
                         "aria-label": "attention weights: rows are queries, columns are keys"});
  panes.appendChild(heat);
  var cells = [], texts = [];
  for (var i = 0; i < T; i++) {
    svg("text", {x: margin - 4, y: margin + (i + 0.5) * cell, "text-anchor": "end",
                 "dominant-baseline": "central", "font-size": font, "class": "ax-row-label"}, heat)
      .textContent = name(i);
    var cx = margin + (i + 0.5) * cell;
    svg("text", {x: cx, y: margin - 4, "text-anchor": "start", "font-size": font, "class": "ax-col-label",
                 transform: "rotate(-60 " + cx + " " + (margin - 4) + ")"}, heat).textContent = name(i);
    var row = [], trow = [];
    for (var j = 0; j < T; j++) {
      var r = svg("rect", {x: margin + j * cell, y: margin + i * cell, width: cell - 1, height: cell - 1,
                           "class": "ax-cell", "data-i": i, "data-j": j}, heat);
      row.push(r);
      if (T <= 10) {
        var tx = svg("text", {x: margin + (j + 0.5) * cell, y: margin + (i + 0.5) * cell, "text-anchor": "middle",
                              "dominant-baseline": "central", "font-size": Math.min(10, font),
                              "class": "ax-cell-text"}, heat);
        trow.push(tx);
      }
    }
    cells.push(row);
    texts.push(trow);
  }
  var frame = svg("rect", {"class": "ax-focus", width: cell - 1, height: cell - 1, fill: "none",
                           visibility: "hidden"}, heat);

  var rowH = Math.max(14, Math.min(24, Math.floor(440 / T)));
  var tokW = 10 + longest * 7, tvW = 2 * tokW + 110, tvH = T * rowH + 10;
  var view = svg("svg", {"class": "ax-tokens", width: tvW, height: tvH, viewBox: "0 0 " + tvW + " " + tvH,
                         role: "img", "aria-label": "lines from a query token to the keys it reads"});
  panes.appendChild(view);
  var lines = svg("g", {"class": "ax-lines"}, view);
  var qTok = [], kTok = [];
  for (var p = 0; p < T; p++) {
    var y = 5 + (p + 0.5) * rowH;
    var q = svg("text", {x: tokW, y: y, "text-anchor": "end", "dominant-baseline": "central",
                         "class": "ax-query", "data-i": p, "font-size": 12}, view);
    q.textContent = name(p);
    var k = svg("text", {x: tokW + 110, y: y, "text-anchor": "start", "dominant-baseline": "central",
                         "class": "ax-key", "data-j": p, "font-size": 12}, view);
    k.textContent = name(p);
    qTok.push(q);
    kTok.push(k);
  }
  var readout = el("div", "ax-readout");
  root.appendChild(readout);
  root.appendChild(el("div", "ax-help", "Rows: queries i; columns: keys j. Hover a cell or a query token " +
                                         "(left column) to read its weights."));

  // ------------------------------------------------------------------------------------------ drawing
  var P = null, focus = {i: st.query, j: null};
  function describe() {
    var i = focus.i, j = focus.j;
    if (j === null) {
      var best = 0;
      for (var c = 1; c < T; c++) if (P[i][c] > P[i][best]) best = c;
      readout.textContent = "query " + name(i) + " reads " + (st.causal ? i + 1 : T) + " keys; largest weight " +
        P[i][best].toFixed(3) + " on key " + name(best);
    } else if (st.causal && j > i) {
      readout.textContent = "query " + name(i) + " \u2192 key " + name(j) + ": masked (a future key), weight 0";
    } else {
      readout.textContent = "query " + name(i) + " \u2192 key " + name(j) + ": weight " + P[i][j].toFixed(3);
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
      kTok[t2].setAttribute("class", (st.causal && t2 > i) ? "ax-key ax-off" : "ax-key");
    }
    if (focus.j === null) {
      frame.setAttribute("visibility", "hidden");
    } else {
      frame.setAttribute("x", margin + focus.j * cell);
      frame.setAttribute("y", margin + i * cell);
      frame.setAttribute("visibility", "visible");
    }
    describe();
  }
  function draw() {
    P = weights();
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) {
        var masked = st.causal && j > i;
        cells[i][j].style.fill = masked ? "#c8c8c8" : colour(P[i][j]);
        cells[i][j].setAttribute("class", masked ? "ax-cell ax-masked" : "ax-cell");
        if (texts[i].length) {
          texts[i][j].textContent = masked ? "" : P[i][j].toFixed(2);
          texts[i][j].style.fill = P[i][j] > 0.55 ? "#ffffff" : "#1a1a1a";
        }
      }
    }
    drawLines();
  }
  heat.addEventListener("mouseover", function (ev) {
    var t0 = ev.target;
    if (!t0.classList || !t0.classList.contains("ax-cell") && !t0.classList.contains("ax-cell-text")) return;
    if (t0.classList.contains("ax-cell-text")) return;
    focus = {i: parseInt(t0.getAttribute("data-i"), 10), j: parseInt(t0.getAttribute("data-j"), 10)};
    drawLines();
  });
  view.addEventListener("mouseover", function (ev) {
    var t0 = ev.target;
    if (!t0.classList || !t0.classList.contains("ax-query")) return;
    focus = {i: parseInt(t0.getAttribute("data-i"), 10), j: null};
    drawLines();
  });
  draw();
})(document.currentScript);
