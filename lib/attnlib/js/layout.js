// layout: the sizes of the pictures, their markup, and where the panes go on a narrow card.
// The pictures are written as strings: the browser parses thousands of cells far faster than it creates them
// one by one. The live figure (o.room) writes them for a multiple of o.room tokens: the cells, rows and labels
// beyond the text wait hidden ("ax-spare", laid out but not drawn), and a keystroke only shows, hides or renames
// some. Adding or removing elements would make the browser restyle every cell (the theme's structural rules).
// Sets on v: g (the sizes), cell, margin, rowH, tokW, heatW, heatH, tvW; the elements cells, texts (a small table's
// numbers), rows, rowLab, colLab, qTok, kTok, frame, qframe, lines; build(labels).
kit.layout = function (v) {
  var o = v.o, st = v.st, W = v.W, esc = kit.esc;
  function kids(node) { return Array.prototype.slice.call(node.children); }
  function geometry(n, names) {
    var longest = 0, room = o.room ? Math.max(n, Math.ceil(n / o.room) * o.room) : n;
    for (var t = 0; t < n; t++) longest = Math.max(longest, names[t].length);
    var c = Math.max(12, Math.min(34, Math.floor(420 / room))), font = Math.min(12, c - 1);
    var lab = longest * font * 0.62, m = 10 + lab, r = Math.max(14, Math.min(24, Math.floor(440 / room)));
    var tw = 12 + longest * 7.3;
    return {cell: c, font: font, lab: lab, margin: m, rowH: r, tokW: tw, room: room,
            key: [c, font, m, r, tw, room, n <= 10].join(" ")};
  }
  function nameOf(i) { return i < v.T ? esc(v.name(i)) : ""; }
  function hide(i) { return i < v.T ? "" : ' visibility="hidden"'; }
  function spare(i, j) { return i < v.T && j < v.T ? "" : ' aria-hidden="true"'; }
  function labelsHTML(i) {
    var cx = v.margin + (i + 0.5) * v.cell, my = v.margin - 4, g = v.g;
    return '<text x="' + (v.margin - 4) + '" y="' + cx + '" text-anchor="end" dominant-baseline="central" ' +
      'font-size="' + g.font + '" class="ax-row-label"' + hide(i) + ">" + nameOf(i) + "</text>" +
      '<text x="' + cx + '" y="' + my + '" text-anchor="start" font-size="' + g.font + '" ' +
      'class="ax-col-label" transform="rotate(-60 ' + cx + " " + my + ')"' + hide(i) + ">" + nameOf(i) + "</text>";
  }
  // A cell's class: the canvas (o.canvas) shows what a cell is, and then the class never changes.
  v.cellClass = function (i, j) { return !v.paper && st.causal && j > i ? "ax-cell ax-masked" : "ax-cell"; };
  function rowHTML(i) {
    var out = ['<g role="row" aria-rowindex="' + (i + 1) + '" aria-label="' + kit.fmt(W.query, {name: nameOf(i)}) +
               '"' + spare(i, 0) + ">"], m = v.margin, c = v.cell;
    for (var j = 0; j < v.g.room; j++) {
      out.push('<rect x="' + (m + j * c) + '" y="' + (m + i * c) + '" width="' + (c - 1) +
               '" height="' + (c - 1) + '" class="' + v.cellClass(i, j) + '"' + spare(i, j) +
               ' data-i="' + i + '" data-j="' + j + '" role="gridcell" tabindex="-1" aria-colindex="' + (j + 1) +
               '" aria-label="' + kit.fmt(W.key, {name: nameOf(j)}) + '"></rect>');
    }
    return out.join("") + "</g>";
  }
  function keyHTML(t) {
    return '<text x="' + (v.tokW + 110) + '" y="' + (5 + (t + 0.5) * v.rowH) + '" text-anchor="start" ' +
      'dominant-baseline="central" class="ax-key" data-j="' + t + '" font-size="12"' + hide(t) + ">" + nameOf(t) +
      "</text>";
  }
  function queryHTML(t) {
    return '<text x="' + v.tokW + '" y="' + (5 + (t + 0.5) * v.rowH) + '" text-anchor="end" ' +
      'dominant-baseline="central" class="ax-query" data-i="' + t + '" font-size="12" role="option" ' +
      'tabindex="-1" aria-selected="false" aria-label="' + kit.fmt(W.query, {name: nameOf(t)}) + '"' + hide(t) +
      ">" + nameOf(t) + "</text>";
  }
  function size(e, w, h) {
    e.setAttribute("width", String(w));
    e.setAttribute("height", String(h));
    e.setAttribute("viewBox", "0 0 " + w + " " + h);
  }
  // build(labels): the pictures for these tokens (again when the text changes), then draw() colours them.
  v.build = function (newLabels) {
    var old = v.T, oldNames = [], names = [], t;
    for (t = 0; t < old; t++) oldNames.push(v.name(t));
    v.labels = newLabels;
    v.T = newLabels.length;
    for (t = 0; t < v.T; t++) names.push(v.name(t));
    if (!v.T) {                                       // nothing to draw (the live figure's empty box)
      [v.heat, v.over, v.list].forEach(kit.clear);
      if (v.paper) v.paper.width = 0;
      v.g = null;
      return;
    }
    var q = st.query === null || st.query === undefined || st.query >= v.T ? v.T - 1 : st.query;
    if (old !== v.T) v.home(q);
    var ng = geometry(v.T, names), same = v.g && v.g.key === ng.key && old > 0, g = v.g = ng;
    v.cell = g.cell;
    v.margin = g.margin;
    v.rowH = g.rowH;
    v.tokW = g.tokW;
    // The last column's label, turned by 60 degrees, reaches half its length to the right of its column.
    v.heatW = Math.ceil(v.margin + (g.room - 0.5) * v.cell + 0.5 * g.lab + g.font + 4);
    v.heatH = Math.ceil(v.margin + g.room * v.cell + 6);
    v.tvW = Math.ceil(2 * v.tokW + 110);
    var tvH = g.room * v.rowH + 10;
    if (!same) {
      size(v.heat, v.heatW, v.heatH);
      size(v.over, v.heatW, v.heatH);
      size(v.list, v.tvW, tvH);
      if (o.minCell) v.stack.style.minWidth = Math.ceil(v.heatW * Math.min(1, o.minCell / v.cell)) + "px";
    }
    v.heat.setAttribute("aria-rowcount", String(v.T));
    v.heat.setAttribute("aria-colcount", String(v.T));
    if (same) update(old, oldNames, names); else whole();
    fit();
    v.roving();
    v.draw();
  };
  function whole() {
    var out = [], top = v.paper ? [] : out, i, j, T = v.T, g = v.g, m = v.margin, c = v.cell;
    top.push('<g aria-hidden="true" class="ax-axes">');
    for (i = 0; i < g.room; i++) top.push(labelsHTML(i));
    top.push("</g>");
    for (i = 0; i < g.room; i++) out.push(rowHTML(i));
    if (T <= 10 && !o.room) {                        // a small table shows its numbers in the cells
      out.push('<g aria-hidden="true">');
      for (i = 0; i < T; i++) {
        for (j = 0; j < T; j++) {
          out.push('<text x="' + (m + (j + 0.5) * c) + '" y="' + (m + (i + 0.5) * c) +
                   '" text-anchor="middle" dominant-baseline="central" font-size="' + Math.min(10, g.font) +
                   '" class="ax-cell-text"></text>');
        }
      }
      out.push("</g>");
    }
    // The frame around the cell that is read: dark outside, white inside, visible on light and dark cells.
    top.push('<g class="ax-focus" visibility="hidden" aria-hidden="true">' +
             '<rect class="ax-focus-out" x="-1.5" y="-1.5" width="' + (c + 2) + '" height="' + (c + 2) +
             '" fill="none"></rect><rect class="ax-focus-in" x="0.5" y="0.5" width="' + (c - 2) +
             '" height="' + (c - 2) + '" fill="none"></rect></g>');
    v.heat.innerHTML = out.join("");
    if (v.paper) v.over.innerHTML = top.join("");
    var axes = v.over.querySelector(".ax-axes"), numbers = v.heat.querySelectorAll("text.ax-cell-text");
    v.rows = Array.prototype.slice.call(v.heat.querySelectorAll('g[role="row"]'));
    v.rowLab = [];
    v.colLab = [];
    kids(axes).forEach(function (e, k) { (k % 2 ? v.colLab : v.rowLab).push(e); });
    v.cells = v.rows.map(kids);
    v.texts = [];
    for (i = 0; numbers.length && i < T; i++) v.texts.push(Array.prototype.slice.call(numbers, i * T, (i + 1) * T));
    v.frame = v.over.querySelector(".ax-focus");
    out = ['<g aria-hidden="true" class="ax-deco"><rect class="ax-qframe" x="2" width="' + v.tokW + '" height="' +
           v.rowH + '" fill="none" visibility="hidden"></rect><g class="ax-lines"></g>'];
    for (i = 0; i < g.room; i++) out.push(keyHTML(i));
    out.push("</g>");
    for (i = 0; i < g.room; i++) out.push(queryHTML(i));
    v.list.innerHTML = out.join("");
    v.qframe = v.list.querySelector(".ax-qframe");
    v.lines = v.list.querySelector(".ax-lines");
    v.qTok = Array.prototype.slice.call(v.list.querySelectorAll("text.ax-query"));
    v.kTok = Array.prototype.slice.call(v.list.querySelectorAll("text.ax-key"));
    v.fresh();                                        // new cells: the old tab stops and colours are gone
  }
  // The same sizes, other tokens: show or hide the rows and columns between the old and the new length, and
  // rename what changed.
  function update(old, oldNames, names) {
    var T = v.T, lo = Math.min(old, T), hi = Math.max(old, T), i, j, r, cells = v.cells;
    function show(e, on) { e.setAttribute("visibility", on ? "visible" : "hidden"); }
    function aria(e, on) { if (on) e.removeAttribute("aria-hidden"); else e.setAttribute("aria-hidden", "true"); }
    for (i = 0; i < hi; i++) {
      for (j = i < lo ? lo : 0; j < hi; j++) {
        aria(cells[i][j], i < T && j < T);
        v.colour(i, j, "");
      }
    }
    for (i = lo; i < hi; i++) {
      aria(v.rows[i], i < T);
      [v.rowLab[i], v.colLab[i], v.qTok[i], v.kTok[i]].forEach(function (e) { show(e, i < T); });
    }
    for (i = 0; i < T; i++) {
      if (i < old && oldNames[i] === names[i]) continue;
      var q = kit.fmt(W.query, {name: names[i]}), k = kit.fmt(W.key, {name: names[i]});
      [v.rowLab[i], v.colLab[i], v.qTok[i], v.kTok[i]].forEach(function (e) { e.textContent = names[i]; });
      v.rows[i].setAttribute("aria-label", q);
      v.qTok[i].setAttribute("aria-label", q);
      for (r = 0; r < T; r++) cells[r][i].setAttribute("aria-label", k);
      if (i >= old) for (j = 0; j < T; j++) cells[i][j].setAttribute("aria-label", kit.fmt(W.key, {name: names[j]}));
    }
  }

  // Side by side where both pictures fit; else one column, the readout under the heatmap (sticky: it stays on
  // screen while the reader taps the tokens below). The pictures scale down to the card (CSS max-width).
  // The card's width is read when it changes, never right after a redraw (that would force a layout).
  var innerW = 0, root = v.root;
  function measure() {
    var cs = getComputedStyle(root);
    innerW = root.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    fit();
  }
  function fit() { if (innerW > 0 && v.T) root.classList.toggle("ax-narrow", innerW < v.heatW + 24 + v.tvW); }
  if (window.ResizeObserver) new ResizeObserver(measure).observe(root);
  else window.addEventListener("resize", measure);
  measure();
};
