/* attnlib's interactive figures (attnlib/explore.py, attnlib/live.py): small modules sharing one local registry, kit. */
// Inlined after the figure's JSON data as one script, the modules of attnlib/js/ in the order explore.py's MODULES
// (live.py's LIVE_MODULES) names; each adds its part to kit, local to this script: nothing is global, and a page
// may hold many figures. The figure finds its own container through document.currentScript (no element ids);
// its words come with its data (data.words, from WORDS in explore.py and LIVE_WORDS in live.py).
// core: small helpers every module uses.
kit.el = function (tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};
kit.svg = function (tag, attrs, parent) {
  var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
};
kit.clear = function (node) { node.textContent = ""; };
kit.esc = function (t) {
  return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
};
// A figure's words with their {names} filled in: kit.fmt("query {q}", {q: "3:cat"}) → "query 3:cat".
kit.fmt = function (words, values) {
  return words.replace(/\{(\w+)\}/g, function (m, k) { return String(values[k]); });
};
// A new part of the figure goes before its help text.
kit.place = function (root, node) {
  var help = root.querySelector(".ax-help");
  if (help && help.parentNode === root) root.insertBefore(node, help); else root.appendChild(node);
};
// softmax of one row z (masked entries -Infinity) into a new array: the row maximum first, so exp never overflows.
kit.softmaxRow = function (z) {
  var top = -Infinity, sum = 0, out = [], j;
  for (j = 0; j < z.length; j++) if (z[j] > top) top = z[j];
  for (j = 0; j < z.length; j++) { out.push(Math.exp(z[j] - top)); sum += out[j]; }
  for (j = 0; j < z.length; j++) out[j] = out[j] / sum;
  return out;
};
kit.slider = function (bar, cls, word, lo, hi, step, value, oninput) {
  var tl = kit.el("label", "ax-control"), input = kit.el("input", cls), shown = kit.el("span", cls + "-value");
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
};
