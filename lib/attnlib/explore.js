/* attnlib.explore: interactive attention figures, inlined after their JSON data by attnlib/explore.py (weights
   computed from stored scores S = Q K^T) and by attnlib/live.py (chapter 8's model, which live.js runs on the
   reader's text).
   Finds its own container through document.currentScript (no element ids).
   One attention view serves both: the heatmap is an ARIA grid with one tab stop (roving tabindex; arrows,
   Home/End, Ctrl+Home/End, Enter or Space picks the row's query), the query tokens are a listbox with one tab
   stop, the readout is a polite live region, and the weights table inside <details> follows every change. */
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
  root.setAttribute("aria-label", (data.kind === "live" ? "live model" : "interactive attention figure") +
                    (data.title ? ": " + data.title : ""));
  var fallback = root.querySelector(".ax-fallback");
  if (fallback) fallback.parentNode.removeChild(fallback);

  var SVG = "http://www.w3.org/2000/svg";
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
  function clear(node) { node.textContent = ""; }
  var help = root.querySelector(".ax-help");
  function place(node) {
    if (help && help.parentNode === root) root.insertBefore(node, help); else root.appendChild(node);
  }
  // softmax of one row z (masked entries -Infinity) into a new array: the row maximum first, so exp never overflows.
  function softmaxRow(z) {
    var top = -Infinity, sum = 0, out = [], j;
    for (j = 0; j < z.length; j++) if (z[j] > top) top = z[j];
    for (j = 0; j < z.length; j++) { out.push(Math.exp(z[j] - top)); sum += out[j]; }
    for (j = 0; j < z.length; j++) out[j] = out[j] / sum;
    return out;
  }
  // Matplotlib's "Blues", five stops.
  var STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  var MASKED = [200, 200, 200], GREY = css(MASKED);
  function css(c) { return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; }
  function rgb(w) {
    var x = Math.max(0, Math.min(1, w)) * (STOPS.length - 1), k = Math.min(Math.floor(x), STOPS.length - 2);
    var f = x - k, a = STOPS[k], b = STOPS[k + 1];
    return [Math.round(a[0] + f * (b[0] - a[0])), Math.round(a[1] + f * (b[1] - a[1])),
            Math.round(a[2] + f * (b[2] - a[2]))];
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

  // ============================================================================================ the attention view
  // o: L, h, layerLabel, st ({layer, head, causal, query}), bar (where the block and head menus go),
  // weights() → P (T × T) for st.layer and st.head, caption(label) → the table's caption, onSelect() after a menu.
  // build(labels) draws the pictures for these tokens (again when the text changes); draw() recolours them.
  function attentionView(o) {
    var st = o.st, labels = [], T = 0, P = null, menus = {};
    function name(i) { return i + ":" + labels[i]; }
    // The same words as _label in explore.py.
    function label() {
      var which = o.L > 1 ? " of " + o.layerLabel + " " + st.layer + " head " + st.head :
        (o.h > 1 ? " of head " + st.head : "");
      return "attention weights" + which + " over " + T + " tokens";
    }
    function menu(cls, word, n, key) {
      var lab = el("label", "ax-control"), sel = el("select", cls);
      lab.appendChild(document.createTextNode(word + " "));
      for (var k = 0; k < n; k++) {
        var opt = el("option", null, String(k));
        opt.value = String(k);
        sel.appendChild(opt);
      }
      sel.value = String(st[key]);
      sel.addEventListener("change", function () { st[key] = parseInt(sel.value, 10); draw(); if (o.onSelect) o.onSelect(); });
      lab.appendChild(sel);
      o.bar.appendChild(lab);
      menus[key] = sel;
    }
    if (o.L > 1) menu("ax-layer", o.layerLabel, o.L, "layer");
    if (o.h > 1) menu("ax-head", "head", o.h, "head");

    var readout = root.querySelector(".ax-readout") || el("div", "ax-readout");
    readout.setAttribute("role", "status");
    readout.setAttribute("aria-live", "polite");
    readout.setAttribute("aria-atomic", "true");
    var tableBox = root.querySelector(".ax-table-scroll");
    var table = root.querySelector(".ax-table table");
    var panes = el("div", "ax-panes");
    place(panes);
    var heatBox = el("div", "ax-heat");
    panes.appendChild(heatBox);
    // tabindex -1 on each <svg>: Chromium would make the picture itself one more tab stop.
    // o.canvas: the heatmap and its canvas share one box (the canvas behind, stretched to the picture).
    var stack = heatBox, paper = null;
    if (o.canvas) {
      stack = el("div", "ax-stack");
      paper = el("canvas", "ax-colours");
      paper.setAttribute("aria-hidden", "true");
      stack.appendChild(paper);
      heatBox.appendChild(stack);
    }
    var heat = svg("svg", {"class": "ax-heatmap", role: "grid", tabindex: -1}, stack);
    // ... and the labels and the focus frame on a picture of their own, over the cells: what changes as the reader
    // types is then the canvas and this small picture, never the picture of the cells.
    var over = paper ? svg("svg", {"class": "ax-heat-over", "aria-hidden": "true"}, stack) : heat;
    var view = svg("svg", {"class": "ax-tokens", role: "listbox", "aria-orientation": "vertical", tabindex: -1});
    panes.appendChild(readout);
    panes.appendChild(view);

    var cells = [], texts = [], qTok = [], kTok = [], tdRows = [];
    var frame, qframe, lines, margin, cell, heatW, heatH, rowH, tokW, tvW;
    var focus = {i: 0, j: null}, at = {i: 0, j: 0}, atQuery = 0;  // the one cell and the one token that take Tab
    var inHeat = false, inView = false;

    function esc(t) {
      return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
    }
    // The pictures are written as strings: the browser parses thousands of cells far faster than it creates them
    // one by one. The live figure (o.room) writes them for a multiple of o.room tokens: the cells, rows and labels
    // beyond the text wait hidden ("ax-spare", laid out but not drawn), and a keystroke only shows, hides or renames
    // some. Adding or removing elements would make the browser restyle every cell (the theme's structural rules).
    var g = null, rows = [], rowLab = [], colLab = [], fills = [];
    function geometry(n, names) {
      var longest = 0, room = o.room ? Math.max(n, Math.ceil(n / o.room) * o.room) : n;
      for (var t = 0; t < n; t++) longest = Math.max(longest, names[t].length);
      var c = Math.max(12, Math.min(34, Math.floor(420 / room))), font = Math.min(12, c - 1);
      var lab = longest * font * 0.62, m = 10 + lab, r = Math.max(14, Math.min(24, Math.floor(440 / room)));
      var tw = 12 + longest * 7.3;
      return {cell: c, font: font, lab: lab, margin: m, rowH: r, tokW: tw, room: room,
              key: [c, font, m, r, tw, room, n <= 10].join(" ")};
    }
    function nameOf(i) { return i < T ? esc(name(i)) : ""; }
    function hide(i) { return i < T ? "" : ' visibility="hidden"'; }
    // o.canvas (the live figure): the colours are drawn on a canvas under the cells, which stay as unpainted
    // targets for the pointer and the keyboard; a keystroke then redraws a canvas, not thousands of shapes.
    var ink2d = null, dpr = 1;
    function spare(i, j) { return i < T && j < T ? "" : ' aria-hidden="true"'; }
    function labelsHTML(i) {
      var cx = margin + (i + 0.5) * cell, my = margin - 4;
      return '<text x="' + (margin - 4) + '" y="' + cx + '" text-anchor="end" dominant-baseline="central" ' +
        'font-size="' + g.font + '" class="ax-row-label"' + hide(i) + ">" + nameOf(i) + "</text>" +
        '<text x="' + cx + '" y="' + my + '" text-anchor="start" font-size="' + g.font + '" ' +
        'class="ax-col-label" transform="rotate(-60 ' + cx + " " + my + ')"' + hide(i) + ">" + nameOf(i) + "</text>";
    }
    function cellClass(i, j) {
      if (paper) return "ax-cell";                 // the canvas shows what a cell is; the class never changes
      return st.causal && j > i ? "ax-cell ax-masked" : "ax-cell";
    }
    function rowHTML(i) {
      var out = ['<g role="row" aria-rowindex="' + (i + 1) + '" aria-label="query ' + nameOf(i) + '"' + spare(i, 0) + ">"];
      for (var j = 0; j < g.room; j++) {
        out.push('<rect x="' + (margin + j * cell) + '" y="' + (margin + i * cell) + '" width="' + (cell - 1) +
                 '" height="' + (cell - 1) + '" class="' + cellClass(i, j) + '"' + spare(i, j) +
                 ' data-i="' + i + '" data-j="' + j + '" role="gridcell" tabindex="-1" aria-colindex="' + (j + 1) +
                 '" aria-label="key ' + nameOf(j) + '"></rect>');
      }
      return out.join("") + "</g>";
    }
    function keyHTML(t) {
      return '<text x="' + (tokW + 110) + '" y="' + (5 + (t + 0.5) * rowH) + '" text-anchor="start" ' +
        'dominant-baseline="central" class="ax-key" data-j="' + t + '" font-size="12"' + hide(t) + ">" + nameOf(t) +
        "</text>";
    }
    function queryHTML(t) {
      return '<text x="' + tokW + '" y="' + (5 + (t + 0.5) * rowH) + '" text-anchor="end" ' +
        'dominant-baseline="central" class="ax-query" data-i="' + t + '" font-size="12" role="option" ' +
        'tabindex="-1" aria-selected="false" aria-label="query ' + nameOf(t) + '"' + hide(t) + ">" + nameOf(t) +
        "</text>";
    }
    // A cell's colour ("" clears it): on the canvas, or the cell's own fill.
    function colour(i, j, f) {
      fills[i][j] = f;
      if (!ink2d) { cells[i][j].style.fill = f; return; }
      ink2d.clearRect(margin + j * cell, margin + i * cell, cell - 1, cell - 1);
      if (!f) return;
      ink2d.fillStyle = f;
      ink2d.fillRect(margin + j * cell, margin + i * cell, cell - 1, cell - 1);
    }
    function kids(node, from) { return Array.prototype.slice.call(node.children, from); }
    function build(newLabels) {
      var old = T, oldNames = [], t;
      for (t = 0; t < old; t++) oldNames.push(name(t));
      labels = newLabels;
      T = labels.length;
      var names = [];
      for (t = 0; t < T; t++) names.push(name(t));
      if (!T) {                                       // nothing to draw (the live figure's empty box)
        [heat, over, view].forEach(clear);
        if (paper) paper.width = 0;
        g = null;
        return;
      }
      var q = st.query === null || st.query === undefined || st.query >= T ? T - 1 : st.query;
      if (old !== T) { focus = {i: q, j: null}; at = {i: q, j: 0}; atQuery = q; }
      var ng = geometry(T, names), same = g && g.key === ng.key && old > 0;
      g = ng;
      cell = g.cell;
      margin = g.margin;
      rowH = g.rowH;
      tokW = g.tokW;
      // The last column's label, turned by 60 degrees, reaches half its length to the right of its column.
      heatW = Math.ceil(margin + (g.room - 0.5) * cell + 0.5 * g.lab + g.font + 4);
      heatH = Math.ceil(margin + g.room * cell + 6);
      tvW = Math.ceil(2 * tokW + 110);
      var tvH = g.room * rowH + 10;
      if (!same) {
        [[heat, heatW, heatH], [over, heatW, heatH], [view, tvW, tvH]].forEach(function (p) {
          p[0].setAttribute("width", p[1]);
          p[0].setAttribute("height", p[2]);
          p[0].setAttribute("viewBox", "0 0 " + p[1] + " " + p[2]);
        });
        if (o.minCell) stack.style.minWidth = Math.ceil(heatW * Math.min(1, o.minCell / cell)) + "px";
      }
      heat.setAttribute("aria-rowcount", T);
      heat.setAttribute("aria-colcount", T);
      if (same) update(old, oldNames, names); else whole();
      fit();
      roving();
      draw();
    }
    function whole() {
      var out = [], top = paper ? [] : out, i, j;
      top.push('<g aria-hidden="true" class="ax-axes">');
      for (i = 0; i < g.room; i++) top.push(labelsHTML(i));
      top.push("</g>");
      for (i = 0; i < g.room; i++) out.push(rowHTML(i));
      if (T <= 10 && !o.room) {                        // a small table shows its numbers in the cells
        out.push('<g aria-hidden="true">');
        for (i = 0; i < T; i++) {
          for (j = 0; j < T; j++) {
            out.push('<text x="' + (margin + (j + 0.5) * cell) + '" y="' + (margin + (i + 0.5) * cell) +
                     '" text-anchor="middle" dominant-baseline="central" font-size="' + Math.min(10, g.font) +
                     '" class="ax-cell-text"></text>');
          }
        }
        out.push("</g>");
      }
      // The frame around the cell that is read: dark outside, white inside, visible on light and dark cells.
      top.push('<g class="ax-focus" visibility="hidden" aria-hidden="true">' +
               '<rect class="ax-focus-out" x="-1.5" y="-1.5" width="' + (cell + 2) + '" height="' + (cell + 2) +
               '" fill="none"></rect><rect class="ax-focus-in" x="0.5" y="0.5" width="' + (cell - 2) +
               '" height="' + (cell - 2) + '" fill="none"></rect></g>');
      heat.innerHTML = out.join("");
      if (paper) over.innerHTML = top.join("");
      stops = null;                                   // the old tab stops are gone with the old cells
      var axes = over.querySelector(".ax-axes"), numbers = heat.querySelectorAll("text.ax-cell-text");
      if (paper) {                                    // a fresh canvas of the picture's size (clears it too)
        dpr = window.devicePixelRatio || 1;
        paper.width = Math.ceil(heatW * dpr);
        paper.height = Math.ceil(heatH * dpr);
        ink2d = paper.getContext("2d");
        ink2d.setTransform(paper.width / heatW, 0, 0, paper.height / heatH, 0, 0);
      }
      rows = Array.prototype.slice.call(heat.querySelectorAll('g[role="row"]'));
      rowLab = [];
      colLab = [];
      kids(axes, 0).forEach(function (e, k) { (k % 2 ? colLab : rowLab).push(e); });
      cells = rows.map(function (r) { return kids(r, 0); });
      fills = cells.map(function (r) { return r.map(function () { return ""; }); });
      drawn = [];
      texts = [];
      for (i = 0; numbers.length && i < T; i++) texts.push(Array.prototype.slice.call(numbers, i * T, (i + 1) * T));
      frame = over.querySelector(".ax-focus");
      out = ['<g aria-hidden="true" class="ax-deco"><rect class="ax-qframe" x="2" width="' + tokW + '" height="' +
             rowH + '" fill="none" visibility="hidden"></rect><g class="ax-lines"></g>'];
      for (i = 0; i < g.room; i++) out.push(keyHTML(i));
      out.push("</g>");
      for (i = 0; i < g.room; i++) out.push(queryHTML(i));
      view.innerHTML = out.join("");
      qframe = view.querySelector(".ax-qframe");
      lines = view.querySelector(".ax-lines");
      qTok = Array.prototype.slice.call(view.querySelectorAll("text.ax-query"));
      kTok = Array.prototype.slice.call(view.querySelectorAll("text.ax-key"));
      masksFor = st.causal;
    }
    // The same sizes, other tokens: show or hide the rows and columns between the old and the new length, and
    // rename what changed.
    function update(old, oldNames, names) {
      var lo = Math.min(old, T), hi = Math.max(old, T), i, j, r;
      function show(e, on) { e.setAttribute("visibility", on ? "visible" : "hidden"); }
      function aria(e, on) { if (on) e.removeAttribute("aria-hidden"); else e.setAttribute("aria-hidden", "true"); }
      for (i = 0; i < hi; i++) {
        for (j = i < lo ? lo : 0; j < hi; j++) {
          aria(cells[i][j], i < T && j < T);
          colour(i, j, "");
        }
      }
      for (i = lo; i < hi; i++) {
        aria(rows[i], i < T);
        [rowLab[i], colLab[i], qTok[i], kTok[i]].forEach(function (e) { show(e, i < T); });
      }
      for (i = 0; i < T; i++) {
        if (i < old && oldNames[i] === names[i]) continue;
        [rowLab[i], colLab[i], qTok[i], kTok[i]].forEach(function (e) { e.textContent = names[i]; });
        rows[i].setAttribute("aria-label", "query " + names[i]);
        qTok[i].setAttribute("aria-label", "query " + names[i]);
        for (r = 0; r < T; r++) cells[r][i].setAttribute("aria-label", "key " + names[i]);
        if (i >= old) for (j = 0; j < T; j++) cells[i][j].setAttribute("aria-label", "key " + names[j]);
      }
    }
    // The text alternative: the table the page was written with, or one made here for new tokens. A live
    // figure (o.lazyTable) fills it only while it is open.
    var details = table && table.closest("details"), tableFor = null;
    if (details && o.lazyTable) details.addEventListener("toggle", function () { if (details.open) draw(); });
    function tableShown() { return table && (!o.lazyTable || details.open); }
    function buildTable() {
      var names = [];
      for (var t = 0; t < T; t++) names.push(name(t));
      var key = names.join("\u0000");
      if (tableFor === key) return;
      if (!sameHead(names)) {
        var thead = table.tHead || table.createTHead(), tbody = table.tBodies[0] || table.createTBody();
        var head = ['<tr><th scope="col">query \\ key</th>'], body = [];
        names.forEach(function (n) { head.push('<th scope="col">' + esc(n) + "</th>"); });
        names.forEach(function (n) {
          body.push('<tr><th scope="row">' + esc(n) + "</th>" + new Array(T + 1).join("<td></td>") + "</tr>");
        });
        thead.innerHTML = head.join("") + "</tr>";
        tbody.innerHTML = body.join("");
        drawn = [];
      }
      tableFor = key;
      tdRows = Array.prototype.slice.call(table.tBodies[0].rows).map(function (tr) {
        return Array.prototype.slice.call(tr.cells, 1);
      });
    }
    function sameHead(names) {
      var ths = table.tHead && table.tHead.rows.length ? table.tHead.rows[0].cells : [];
      if (ths.length !== names.length + 1) return false;
      for (var t = 0; t < names.length; t++) if (ths[t + 1].textContent !== names[t]) return false;
      return true;
    }

    // Side by side where both pictures fit; else one column, the readout under the heatmap (sticky: it stays on
    // screen while the reader taps the tokens below). The pictures scale down to the card (CSS max-width).
    // The card's width is read when it changes, never right after a redraw (that would force a layout).
    var innerW = 0;
    function measure() {
      var cs = getComputedStyle(root);
      innerW = root.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      fit();
    }
    function fit() { if (innerW > 0 && T) root.classList.toggle("ax-narrow", innerW < heatW + 24 + tvW); }
    if (window.ResizeObserver) new ResizeObserver(measure).observe(root);
    else window.addEventListener("resize", measure);
    measure();

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
    var stops = null;   // the cell and the query token that hold the tab stop (tabindex 0)
    function roving() {
      if (stops) stops.forEach(function (e) { e.setAttribute("tabindex", "-1"); });
      stops = [cells[at.i][at.j], qTok[atQuery]];
      stops.forEach(function (e) { e.setAttribute("tabindex", "0"); });
    }
    function put(e, k, v) { v = String(v); if (e.getAttribute(k) !== v) e.setAttribute(k, v); }   // only changes
    function drawLines() {
      var i = focus.i, y0 = 5 + (i + 0.5) * rowH, out = [];
      for (var j = 0; j < T; j++) {
        var w = P[i][j];
        if (!(w > 0)) continue;
        out.push('<line x1="' + (tokW + 4) + '" y1="' + y0 + '" x2="' + (tokW + 106) + '" y2="' + (5 + (j + 0.5) * rowH) +
                 '" class="ax-line' + (focus.j === j ? " ax-line-on" : "") + '" stroke-width="' + (1 + 5 * w).toFixed(2) +
                 '" stroke-opacity="' + Math.max(0.04, w).toFixed(3) + '" data-j="' + j + '"></line>');
      }
      lines.innerHTML = out.join("");
      for (var t = 0; t < T; t++) {
        put(qTok[t], "class", t === i ? "ax-query ax-on" : "ax-query");
        put(qTok[t], "aria-selected", t === i ? "true" : "false");
        put(kTok[t], "class", (st.causal && t > i) ? "ax-key ax-off" : "ax-key");
      }
      put(view, "aria-label", "query tokens; lines from query " + name(i) +
                        " to the keys it reads, as strong as the weight");
      var fi = inHeat ? at.i : focus.i, fj = inHeat ? at.j : focus.j;
      if (fj === null) {
        put(frame, "visibility", "hidden");
      } else {
        put(frame, "transform", "translate(" + (margin + fj * cell) + " " + (margin + fi * cell) + ")");
        put(frame, "visibility", "visible");
      }
      put(qframe, "y", 5 + atQuery * rowH);
      put(qframe, "visibility", inView ? "visible" : "hidden");
      describe();
    }
    var masksFor = null;   // the mask the cells' classes show
    var drawn = [], drawnFor = null, tableDrawn = false;   // the rows of P last drawn, for which head, table too
    function draw() {
      if (!T) return;
      P = o.weights();
      var showTable = tableShown(), marks = masksFor !== st.causal;
      if (showTable) buildTable();
      if (showTable !== tableDrawn) drawn = [];
      for (var i = 0; i < T; i++) {
        // A row that is the same array as the one drawn last (the live figure's unchanged prefix) keeps its
        // colours; only its new, masked cells are coloured.
        var known = drawn[i] === P[i] && drawnFor === st.layer + " " + st.head ? i + 1 : 0;
        drawn[i] = P[i];
        for (var j = known; j < T; j++) {
          var masked = st.causal && j > i, c = masked ? MASKED : rgb(P[i][j]), f = masked ? GREY : css(c);
          if (fills[i][j] !== f) colour(i, j, f);
          if (marks && !paper) cells[i][j].setAttribute("class", cellClass(i, j));
          if (texts.length) {
            texts[i][j].textContent = masked ? "" : P[i][j].toFixed(2);
            texts[i][j].style.fill = ink(c);
          }
          if (showTable) {
            var v = masked ? "\u2014" : P[i][j].toFixed(3);
            if (tdRows[i][j].textContent !== v) tdRows[i][j].textContent = v;
          }
        }
      }
      masksFor = st.causal;
      drawn.length = T;
      drawnFor = st.layer + " " + st.head;
      tableDrawn = showTable;
      heat.setAttribute("aria-label", label());
      if (table && table.caption) table.caption.textContent = o.caption(label());
      if (tableBox) tableBox.setAttribute("aria-label", label());
      drawLines();
    }
    function index(e, what) { return parseInt(e.getAttribute(what), 10); }
    function isCell(e) {                          // a cell of the text (the live figure's spare ones do not count)
      return e && e.classList && e.classList.contains("ax-cell") && index(e, "data-i") < T && index(e, "data-j") < T;
    }
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
    heat.addEventListener("focusout", function () { inHeat = false; if (T) drawLines(); });
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
    view.addEventListener("focusout", function () { inView = false; if (T) drawLines(); });
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
    // Pick a block and a head from outside (the live figure's overview of every head).
    function select(layer, head) {
      st.layer = layer;
      st.head = head;
      if (menus.layer) menus.layer.value = String(layer);
      if (menus.head) menus.head.value = String(head);
      draw();
    }
    return {build: build, draw: draw, select: select, label: label};
  }

  // ============================================================================================ stored scores
  // P = softmax(S / (sqrt(d_k) * tau) + M) from the scores in the page, whenever a control changes.
  function storedFigure() {
    var st = data.state;
    // The same words as _caption in explore.py.
    function caption(label) {
      var parts = [label];
      if (data.controls.scale) parts.push(st.scaled ? "divided by \u221Ad_k" : "not divided by \u221Ad_k");
      if (data.controls.mask) parts.push(st.causal ? "causal mask on" : "causal mask off");
      if (data.controls.temperature) parts.push("temperature \u03C4 = " + st.temperature.toFixed(2));
      var text = parts.join(", ") + ". Rows: queries i; columns: keys j; 3 decimals";
      return text + (st.causal ? "; \u2014: a future key, masked (weight 0)." : ".");
    }
    function weights() {
      var S = data.S[st.layer][st.head], P = [];
      var div = (st.scaled ? Math.sqrt(data.d_k) : 1) * st.temperature;
      for (var i = 0; i < data.T; i++) {
        var z = [];
        for (var j = 0; j < data.T; j++) z.push((st.causal && j > i) ? -Infinity : S[i][j] / div);
        P.push(softmaxRow(z));
      }
      return P;
    }
    if (data.title) place(el("div", "ax-title", data.title));
    var bar = el("div", "ax-controls");
    place(bar);
    var v = attentionView({L: data.L, h: data.h, layerLabel: data.layerLabel, st: st, bar: bar,
                           weights: weights, caption: caption});
    function toggle(cls, text, key) {
      var lab = el("label", "ax-control"), box = el("input", cls);
      box.type = "checkbox";
      box.checked = st[key];
      box.addEventListener("change", function () { st[key] = box.checked; v.draw(); });
      lab.appendChild(box);
      lab.appendChild(document.createTextNode(" " + text));
      bar.appendChild(lab);
    }
    if (data.controls.scale) toggle("ax-scale", "divide by \u221Ad_k (d_k = " + data.d_k + ")", "scaled");
    if (data.controls.mask) toggle("ax-mask", "causal mask M", "causal");
    if (data.controls.temperature) {
      var r = data.tempRange;
      slider(bar, "ax-temp", "temperature \u03C4 ", r[0], r[1], r[2], st.temperature, function (x) {
        st.temperature = x;
        v.draw();
      });
    }
    v.build(data.labels);
  }
  function slider(bar, cls, word, lo, hi, step, value, oninput) {
    var tl = el("label", "ax-control"), input = el("input", cls), shown = el("span", cls + "-value");
    input.type = "range";
    input.min = String(lo);
    input.max = String(hi);
    input.step = String(step);
    input.value = String(value);
    shown.textContent = value.toFixed(2);
    input.addEventListener("input", function () {
      var x = parseFloat(input.value);
      shown.textContent = x.toFixed(2);
      oninput(x);
    });
    tl.appendChild(document.createTextNode(word));
    tl.appendChild(input);
    tl.appendChild(document.createTextNode(" "));
    tl.appendChild(shown);
    bar.appendChild(tl);
    return input;
  }

  // The live figure (attnlib/live.py) inlines live.js before this script: it builds its controls and runs the
  // model, with this script's pieces.
  var kit = {el: el, clear: clear, place: place, softmaxRow: softmaxRow, rgb: rgb, MASKED: MASKED,
             slider: slider, attentionView: attentionView};
  if (data.kind === "live") { if (window.attnlibLive) window.attnlibLive(root, data, kit); } else storedFigure();
})(document.currentScript);
