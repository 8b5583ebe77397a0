// stored: a figure of stored scores (explore.py): P = softmax(S / (sqrt(d_k) * tau) + M) from the scores in the
// page, whenever a control changes.
kit.storedFigure = function (root, data) {
  var st = data.state, W = data.words, el = kit.el, on = data.controls;
  // The same words as _caption in explore.py.
  function caption(label) {
    var parts = [label];
    if (on.scale) parts.push(st.scaled ? W.scaled : W.unscaled);
    if (on.mask) parts.push(st.causal ? W.maskOn : W.maskOff);
    if (on.temperature) parts.push(kit.fmt(W.temperature, {tau: st.temperature.toFixed(2)}));
    return parts.join(", ") + W.rows + (st.causal ? W.masked : ".");
  }
  function weights() {
    var S = data.S[st.layer][st.head], P = [];
    var div = (st.scaled ? Math.sqrt(data.d_k) : 1) * st.temperature;
    for (var i = 0; i < data.T; i++) {
      var z = [];
      for (var j = 0; j < data.T; j++) z.push((st.causal && j > i) ? -Infinity : S[i][j] / div);
      P.push(kit.softmaxRow(z));
    }
    return P;
  }
  if (data.title) kit.place(root, el("div", "ax-title", data.title));
  var bar = el("div", "ax-controls");
  kit.place(root, bar);
  var v = kit.attentionView(root, {L: data.L, h: data.h, layerLabel: data.layerLabel, st: st, words: W, bar: bar,
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
  if (on.scale) toggle("ax-scale", kit.fmt(W.scaleSwitch, {d_k: data.d_k}), "scaled");
  if (on.mask) toggle("ax-mask", W.maskSwitch, "causal");
  if (on.temperature) {
    var r = data.tempRange;
    kit.slider(bar, "ax-temp", W.tauSlider, r[0], r[1], r[2], st.temperature, function (x) {
      st.temperature = x;
      v.draw();
    });
  }
  v.build(data.labels);
};
