// keys: focus, the pointer and the keyboard. One cell and one query token hold the tab stop (tabindex 0, roving);
// hovering reads a cell or a query, a click or a tap also moves the tab stop there, and focus reads what it lands
// on. Sets on v: focus ({i, j}: what is read, j null for a whole query), at (the cell with the tab stop), atQuery,
// inHeat, inView; home(q), roving().
kit.keys = function (v) {
  var heat = v.heat, list = v.list, stops = null;
  v.home = function (q) { v.focus = {i: q, j: null}; v.at = {i: q, j: 0}; v.atQuery = q; };
  v.home(0);
  v.inHeat = v.inView = false;
  v.roving = function () {
    if (stops) stops.forEach(function (e) { e.setAttribute("tabindex", "-1"); });
    stops = [v.cells[v.at.i][v.at.j], v.qTok[v.atQuery]];
    stops.forEach(function (e) { e.setAttribute("tabindex", "0"); });
  };
  function index(e, what) { return parseInt(e.getAttribute(what), 10); }
  function isCell(e) {                          // a cell of the text (the live figure's spare ones do not count)
    return e && e.classList && e.classList.contains("ax-cell") && index(e, "data-i") < v.T && index(e, "data-j") < v.T;
  }
  function isQuery(e) { return e && e.classList && e.classList.contains("ax-query"); }
  function cellAt(e) { return {i: index(e, "data-i"), j: index(e, "data-j")}; }
  // Read a cell (j null: a whole query); moving the tab stop too where asked.
  function read(i, j, stop) {
    if (stop) v.roving();
    v.focus = {i: i, j: j};
    v.drawLines();
  }

  heat.addEventListener("mouseover", function (ev) {
    if (isCell(ev.target)) { var c = cellAt(ev.target); read(c.i, c.j); }
  });
  list.addEventListener("mouseover", function (ev) {
    if (isQuery(ev.target)) read(index(ev.target, "data-i"), null);
  });
  heat.addEventListener("click", function (ev) {
    if (!isCell(ev.target)) return;
    v.at = cellAt(ev.target);
    read(v.at.i, v.at.j, true);
  });
  list.addEventListener("click", function (ev) {
    if (!isQuery(ev.target)) return;
    v.atQuery = index(ev.target, "data-i");
    read(v.atQuery, null, true);
  });

  heat.addEventListener("focusin", function (ev) {
    if (!isCell(ev.target)) return;
    v.inHeat = true;
    v.at = cellAt(ev.target);
    read(v.at.i, v.at.j, true);
  });
  heat.addEventListener("focusout", function () { v.inHeat = false; if (v.T) v.drawLines(); });
  heat.addEventListener("keydown", function (ev) {
    if (!isCell(ev.target)) return;
    var T = v.T, i = v.at.i, j = v.at.j, key = ev.key;
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
      v.atQuery = v.at.i;
      read(v.at.i, null, true);
      return;
    } else return;
    ev.preventDefault();
    v.at = {i: i, j: j};
    v.roving();
    v.cells[i][j].focus();
    read(i, j);
  });
  list.addEventListener("focusin", function (ev) {
    if (!isQuery(ev.target)) return;
    v.inView = true;
    v.atQuery = index(ev.target, "data-i");
    read(v.atQuery, null, true);
  });
  list.addEventListener("focusout", function () { v.inView = false; if (v.T) v.drawLines(); });
  list.addEventListener("keydown", function (ev) {
    if (!isQuery(ev.target)) return;
    var T = v.T, i = v.atQuery, key = ev.key;
    if (key === "ArrowDown" || key === "ArrowRight") i = Math.min(T - 1, i + 1);
    else if (key === "ArrowUp" || key === "ArrowLeft") i = Math.max(0, i - 1);
    else if (key === "Home") i = 0;
    else if (key === "End") i = T - 1;
    else if (key !== "Enter" && key !== " " && key !== "Spacebar") return;
    ev.preventDefault();
    v.atQuery = i;
    v.roving();
    v.qTok[i].focus();
    read(i, null);
  });
};
