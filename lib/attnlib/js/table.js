// table: the text alternative, the table the page was written with, or one made here for new tokens. A live
// figure (o.lazyTable) fills it only while it is open. Sets v.table: shown(), prepare() (true when it wrote new
// rows), write(i, j, text), name(label) (its caption and its scroll box's name).
kit.table = function (v) {
  var root = v.root, o = v.o, box = root.querySelector(".ax-table-scroll");
  /** @type {HTMLTableElement} */
  var table = root.querySelector(".ax-table table");
  var details = table && table.closest("details"), tableFor = null, tdRows = [];
  if (details && o.lazyTable) details.addEventListener("toggle", function () { if (details.open) v.draw(); });
  function names() {
    var out = [];
    for (var t = 0; t < v.T; t++) out.push(v.name(t));
    return out;
  }
  function sameHead(ns) {
    var ths = table.tHead && table.tHead.rows.length ? table.tHead.rows[0].cells : [];
    if (ths.length !== ns.length + 1) return false;
    for (var t = 0; t < ns.length; t++) if (ths[t + 1].textContent !== ns[t]) return false;
    return true;
  }
  v.table = {
    shown: function () { return !!table && (!o.lazyTable || details.open); },
    prepare: function () {
      var ns = names(), key = ns.join("\u0000"), fresh = false;
      if (tableFor === key) return false;
      if (!sameHead(ns)) {
        var thead = table.tHead || table.createTHead(), tbody = table.tBodies[0] || table.createTBody();
        var head = ['<tr><th scope="col">' + kit.esc(v.W.corner) + "</th>"], body = [];
        ns.forEach(function (n) { head.push('<th scope="col">' + kit.esc(n) + "</th>"); });
        ns.forEach(function (n) {
          body.push('<tr><th scope="row">' + kit.esc(n) + "</th>" + new Array(ns.length + 1).join("<td></td>") + "</tr>");
        });
        thead.innerHTML = head.join("") + "</tr>";
        tbody.innerHTML = body.join("");
        fresh = true;
      }
      tableFor = key;
      tdRows = Array.prototype.slice.call(table.tBodies[0].rows).map(function (tr) {
        return Array.prototype.slice.call(tr.cells, 1);
      });
      return fresh;
    },
    write: function (i, j, text) { if (tdRows[i][j].textContent !== text) tdRows[i][j].textContent = text; },
    name: function (label) {
      if (table && table.caption) table.caption.textContent = o.caption(label);
      if (box) box.setAttribute("aria-label", label);
    }
  };
};
