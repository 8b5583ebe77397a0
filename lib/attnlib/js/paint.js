// paint: the colours of the cells (on the canvas or the cells' own fill), the numbers in a small table, the lines
// from the query to its keys, the focus frames and the readout. Sets on v: colour(i, j, f), fresh(), draw(),
// drawLines().
// Matplotlib's "Blues", five stops.
kit.STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
kit.MASKED = [200, 200, 200];
kit.css = function (c) { return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; };
kit.rgb = function (w) {
  var STOPS = kit.STOPS, x = Math.max(0, Math.min(1, w)) * (STOPS.length - 1);
  var k = Math.min(Math.floor(x), STOPS.length - 2), f = x - k, a = STOPS[k], b = STOPS[k + 1];
  return [Math.round(a[0] + f * (b[0] - a[0])), Math.round(a[1] + f * (b[1] - a[1])),
          Math.round(a[2] + f * (b[2] - a[2]))];
};
// WCAG relative luminance; black or white text, whichever contrasts more (at least 4.58:1 on any colour).
kit.ink = function (c) {
  var lin = c.map(function (x) { x = x / 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
  var L = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  return (L + 0.05) / 0.05 >= 1.05 / (L + 0.05) ? "#000000" : "#ffffff";
};
kit.paint = function (v) {
  var st = v.st, W = v.W, fmt = kit.fmt, GREY = kit.css(kit.MASKED);
  // o.canvas (the live figure): the colours are drawn on a canvas under the cells, which stay as unpainted
  // targets for the pointer and the keyboard; a keystroke then redraws a canvas, not thousands of shapes.
  var ink2d = null, fills = [];
  var masksFor = null;   // the mask the cells' classes show
  var drawn = [], drawnFor = null, tableDrawn = false;   // the rows of P last drawn, for which head, table too
  // New cells: nothing coloured yet (a fresh canvas of the picture's size clears it too).
  v.fresh = function () {
    var paper = v.paper;
    if (paper) {
      var dpr = window.devicePixelRatio || 1;
      paper.width = Math.ceil(v.heatW * dpr);
      paper.height = Math.ceil(v.heatH * dpr);
      ink2d = paper.getContext("2d");
      ink2d.setTransform(paper.width / v.heatW, 0, 0, paper.height / v.heatH, 0, 0);
    }
    fills = v.cells.map(function (r) { return r.map(function () { return ""; }); });
    drawn = [];
    masksFor = st.causal;
  };
  // A cell's colour ("" clears it): on the canvas, or the cell's own fill.
  v.colour = function (i, j, f) {
    fills[i][j] = f;
    if (!ink2d) { v.cells[i][j].style.fill = f; return; }
    var x = v.margin + j * v.cell, y = v.margin + i * v.cell;
    ink2d.clearRect(x, y, v.cell - 1, v.cell - 1);
    if (!f) return;
    ink2d.fillStyle = f;
    ink2d.fillRect(x, y, v.cell - 1, v.cell - 1);
  };
  function say(text) { if (v.readout.textContent !== text) v.readout.textContent = text; }
  function describe() {
    var i = v.focus.i, j = v.focus.j, P = v.P, T = v.T;
    if (j === null) {
      var best = 0;
      for (var c = 1; c < T; c++) if (P[i][c] > P[i][best]) best = c;
      say(fmt(W.reads, {q: v.name(i), n: st.causal ? i + 1 : T, w: P[i][best].toFixed(3), k: v.name(best)}));
    } else if (st.causal && j > i) {
      say(fmt(W.maskedCell, {q: v.name(i), k: v.name(j)}));
    } else {
      say(fmt(W.cell, {q: v.name(i), k: v.name(j), w: P[i][j].toFixed(3)}));
    }
  }
  function put(e, k, x) { x = String(x); if (e.getAttribute(k) !== x) e.setAttribute(k, x); }   // only changes
  v.drawLines = function () {
    var i = v.focus.i, fj = v.focus.j, T = v.T, P = v.P, rowH = v.rowH, tokW = v.tokW;
    var y0 = 5 + (i + 0.5) * rowH, out = [];
    for (var j = 0; j < T; j++) {
      var w = P[i][j];
      if (!(w > 0)) continue;
      out.push('<line x1="' + (tokW + 4) + '" y1="' + y0 + '" x2="' + (tokW + 106) + '" y2="' + (5 + (j + 0.5) * rowH) +
               '" class="ax-line' + (fj === j ? " ax-line-on" : "") + '" stroke-width="' + (1 + 5 * w).toFixed(2) +
               '" stroke-opacity="' + Math.max(0.04, w).toFixed(3) + '" data-j="' + j + '"></line>');
    }
    v.lines.innerHTML = out.join("");
    for (var t = 0; t < T; t++) {
      put(v.qTok[t], "class", t === i ? "ax-query ax-on" : "ax-query");
      put(v.qTok[t], "aria-selected", t === i ? "true" : "false");
      put(v.kTok[t], "class", (st.causal && t > i) ? "ax-key ax-off" : "ax-key");
    }
    put(v.list, "aria-label", fmt(W.tokens, {q: v.name(i)}));
    var at = v.inHeat ? v.at : v.focus;
    if (at.j === null) {
      put(v.frame, "visibility", "hidden");
    } else {
      put(v.frame, "transform", "translate(" + (v.margin + at.j * v.cell) + " " + (v.margin + at.i * v.cell) + ")");
      put(v.frame, "visibility", "visible");
    }
    put(v.qframe, "y", 5 + v.atQuery * rowH);
    put(v.qframe, "visibility", v.inView ? "visible" : "hidden");
    describe();
  };
  v.draw = function () {
    if (!v.T) return;
    var P = v.P = v.o.weights(), T = v.T, tab = v.table, cells = v.cells, texts = v.texts, paper = v.paper;
    var showTable = tab.shown(), marks = masksFor !== st.causal, head = st.layer + " " + st.head;
    if (showTable && tab.prepare()) drawn = [];       // a new table: every row's numbers to write
    if (showTable !== tableDrawn) drawn = [];
    for (var i = 0; i < T; i++) {
      // A row that is the same array as the one drawn last (the live figure's unchanged prefix) keeps its
      // colours; only its new, masked cells are coloured.
      var known = drawn[i] === P[i] && drawnFor === head ? i + 1 : 0;
      drawn[i] = P[i];
      for (var j = known; j < T; j++) {
        var masked = st.causal && j > i, c = masked ? kit.MASKED : kit.rgb(P[i][j]), f = masked ? GREY : kit.css(c);
        if (fills[i][j] !== f) v.colour(i, j, f);
        if (marks && !paper) cells[i][j].setAttribute("class", v.cellClass(i, j));
        if (texts.length) {
          texts[i][j].textContent = masked ? "" : P[i][j].toFixed(2);
          texts[i][j].style.fill = kit.ink(c);
        }
        if (showTable) tab.write(i, j, masked ? "\u2014" : P[i][j].toFixed(3));
      }
    }
    masksFor = st.causal;
    drawn.length = T;
    drawnFor = head;
    tableDrawn = showTable;
    var label = v.label();
    v.heat.setAttribute("aria-label", label);
    tab.name(label);
    v.drawLines();
  };
};
