// start: find this script's figure and draw it, once (the last module).
kit.start = function (script) {
  var root = script && script.parentElement;
  if (!root || !root.classList.contains("attnlib-explore")) {
    // Some front ends run the script detached from its place: take the first figure not drawn yet.
    root = document.querySelector(".attnlib-explore:not([data-ax-ready])");
  }
  if (!root || root.hasAttribute("data-ax-ready")) return;
  var source = root.querySelector('script[type="application/json"]');
  if (!source) return;
  var data = JSON.parse(source.textContent), W = data.words;
  root.setAttribute("data-ax-ready", "1");
  root.setAttribute("role", "group");
  root.setAttribute("aria-label", (data.kind === "live" ? W.liveFigure : W.figure) + (data.title ? ": " + data.title : ""));
  var fallback = root.querySelector(".ax-fallback");
  if (fallback) fallback.parentNode.removeChild(fallback);
  if (data.kind === "live") kit.liveFigure(root, data); else kit.storedFigure(root, data);
};
kit.start(script);
