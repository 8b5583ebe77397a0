// live: chapter 8's live figure (live.py): the reader's text, the model's ten most likely next characters, every
// head at once, the attention view, and "Continue". What the book's test reads: root.attnlibLive.
kit.liveFigure = function (root, data) {
  var el = kit.el, place = function (node) { kit.place(root, node); }, softmaxRow = kit.softmaxRow;
  var W = data.words, fmt = kit.fmt, seeded = kit.seeded;
  var vocab = data.vocab, chars = data.labels, MAX = data.maxChars, known = Object.create(null);
  vocab.forEach(function (ch, i) { known[ch] = i; });
  var model = kit.liveModel(data), st = data.state, text = "", out = null, probs = null, Pall = null;
  if (data.title) place(el("div", "ax-title", data.title));

  // The reader's text: a character the model never saw is left out (A–Z become a–z), and the page says so.
  var form = el("div", "ax-live-input");
  var boxLabel = el("label", "ax-live-label", fmt(W.box, {max: MAX}));
  var box = el("textarea", "ax-live-text");
  box.rows = 2;
  box.spellcheck = false;
  box.setAttribute("autocomplete", "off");
  box.setAttribute("autocapitalize", "off");
  boxLabel.appendChild(box);
  var count = el("span", "ax-live-count");
  var note = el("p", "ax-live-note");
  note.setAttribute("role", "status");          // a polite live region: a refusal is announced
  form.appendChild(boxLabel);
  form.appendChild(count);
  form.appendChild(note);
  place(form);

  var next = el("div", "ax-live-next");
  var nextTitle = el("div", "ax-live-heading");
  var top = el("ol", "ax-live-top"), choices = [];
  next.appendChild(nextTitle);
  next.appendChild(top);
  place(next);

  var gen = el("div", "ax-controls ax-live-gen");
  var nLabel = el("label", "ax-control", W.characters + " "), nBox = el("input", "ax-live-n");
  nBox.type = "number";
  nBox.min = "1";
  nBox.max = String(MAX);
  nBox.value = String(data.gen.n);
  nLabel.appendChild(nBox);
  gen.appendChild(nLabel);
  var r = data.tempRange;
  var temp = kit.slider(gen, "ax-live-temp", W.tauSlider, r[0], r[1], r[2], data.gen.temperature,
                        function () { tempHelp(); });
  var sLabel = el("label", "ax-control", W.seed + " "), seedBox = el("input", "ax-live-seed");
  seedBox.type = "number";
  seedBox.min = "0";
  seedBox.value = String(data.gen.seed);
  sLabel.appendChild(seedBox);
  gen.appendChild(sLabel);
  var go = el("button", "ax-live-go", W.go);
  go.type = "button";
  gen.appendChild(go);
  var tauNote = el("p", "ax-live-tau");
  place(gen);
  place(tauNote);
  function tempHelp() {
    var tau = parseFloat(temp.value);
    tauNote.textContent = tau === 0 ? W.argmax : fmt(W.drawn, {tau: tau.toFixed(2)});
  }
  tempHelp();

  // Every head at once: one small picture per block and head; pressing one shows it in the heatmap below.
  var overview = el("div", "ax-live-heads");
  overview.setAttribute("role", "group");
  overview.setAttribute("aria-label", W.overview);
  var thumbs = [];
  for (var l = 0; l < data.config.L; l++) {
    var line = el("div", "ax-live-row");
    line.appendChild(el("span", "ax-live-rowname", W.block + " " + (l + 1)));   // blocks 1 … L
    for (var hh = 0; hh < data.config.h; hh++) {
      var btn = el("button", "ax-live-thumb"), cv = el("canvas");
      btn.type = "button";
      btn.setAttribute("aria-label", W.block + " " + (l + 1) + " " + W.head + " " + hh);
      btn.setAttribute("data-layer", l);
      btn.setAttribute("data-head", hh);
      cv.setAttribute("aria-hidden", "true");
      btn.appendChild(cv);
      btn.appendChild(el("span", "ax-live-thumbname", W.head + " " + hh));
      btn.addEventListener("click", function (ev) {
        var b = ev.currentTarget;
        v.select(+b.getAttribute("data-layer"), +b.getAttribute("data-head"));
        pressed();
      });
      line.appendChild(btn);
      thumbs.push({btn: btn, canvas: cv, layer: l, head: hh});
    }
    overview.appendChild(line);
  }
  place(overview);

  var bar = el("div", "ax-controls");
  place(bar);
  st.causal = true;
  var v = kit.attentionView(root, {L: data.config.L, h: data.config.h, layerLabel: W.block, st: st, words: W, bar: bar,
                                   weights: function () { return Pall[st.layer][st.head]; },
                                   caption: function (label) { return fmt(W.liveCaption, {label: label}); },
                                   onSelect: pressed, minCell: 8, lazyTable: true, room: 8, canvas: true});
  function pressed() {
    thumbs.forEach(function (t) {
      t.btn.setAttribute("aria-pressed", t.layer === st.layer && t.head === st.head ? "true" : "false");
    });
  }

  function clean(raw) {
    var kept = "", left = [];
    Array.from(raw).forEach(function (ch) {
      var c = !(ch in known) && ch >= "A" && ch <= "Z" ? ch.toLowerCase() : ch;
      if (c in known) kept += c;
      else if (left.indexOf(ch) < 0) left.push(ch);
    });
    return {text: kept, left: left};
  }
  function shown(ch) { return chars[known[ch]]; }
  function quoted(list) {
    return list.map(function (ch) { return fmt(W.quoted, {ch: ch === "\t" ? W.tab : ch}); }).join(" ");
  }
  function show() {
    var ids = Array.from(text).map(function (ch) { return known[ch]; });
    count.textContent = ids.length + " / " + MAX;
    root.classList.toggle("ax-live-empty", !ids.length);
    if (!ids.length) {
      out = probs = Pall = null;
      kit.clear(top);
      choices = [];
      nextTitle.textContent = W.empty;
      v.build([]);
      return;
    }
    out = model.forward(ids);
    Pall = out.weights();
    probs = softmaxRow(Array.from(out.logits));
    var order = probs.map(function (p, i) { return i; });
    order.sort(function (a, b) { return probs[b] - probs[a] || a - b; });
    nextTitle.textContent = fmt(W.next, {text: Array.from(text).slice(-12).map(shown).join("")});
    order.slice(0, 10).forEach(function (i, k) {      // ten rows, written once and then changed in place
      var li = choices[k];
      if (!li) {
        li = choices[k] = el("li", "ax-live-choice");
        var track = el("span", "ax-live-track");
        li.appendChild(el("span", "ax-live-char"));
        track.appendChild(el("span", "ax-live-bar"));
        li.appendChild(track);
        li.appendChild(el("span", "ax-live-p"));
        top.appendChild(li);
      }
      var p = probs[i].toFixed(3), parts = li.children, width = (probs[i] * 100).toFixed(1) + "%";
      var said = fmt(W.choice, {ch: vocab[i] === " " ? W.space : vocab[i] === "\n" ? W.newline : vocab[i], p: p});
      if (parts[0].textContent !== chars[i]) parts[0].textContent = chars[i];
      if (parts[1].firstChild.style.width !== width) parts[1].firstChild.style.width = width;
      if (parts[2].textContent !== p) parts[2].textContent = p;
      if (li.getAttribute("aria-label") !== said) li.setAttribute("aria-label", said);
    });
    st.query = ids.length - 1;
    v.build(Array.from(text).map(shown));
    thumbs.forEach(drawThumb);
  }
  // The thumbnails' colours as packed RGBA, for weights in steps of 1/1024; a grey masked key, a white empty cell.
  var shades = new Uint32Array(1027), little = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  function pack(col) {
    return little ? (255 << 24 | col[2] << 16 | col[1] << 8 | col[0]) >>> 0 :
      (col[0] << 24 | col[1] << 16 | col[2] << 8 | 255) >>> 0;
  }
  for (var w = 0; w <= 1024; w++) shades[w] = pack(kit.rgb(w / 1024));
  var GREY = pack(kit.MASKED), WHITE = pack([255, 255, 255]);
  function drawThumb(t) {
    var P = Pall[t.layer][t.head], T = P.length, n = Math.ceil(T / 8) * 8, cv = t.canvas;
    if (cv.width !== n) { cv.width = n; cv.height = n; t.img = null; }
    var gc = cv.getContext("2d");
    if (!t.img) { t.img = gc.createImageData(n, n); t.px = new Uint32Array(t.img.data.buffer); }
    for (var i = 0; i < n; i++) {
      var row = P[i];
      for (var j = 0; j < n; j++) t.px[i * n + j] = i >= T || j >= T ? WHITE : j > i ? GREY : shades[Math.round(row[j] * 1024)];
    }
    gc.putImageData(t.img, 0, 0);
  }
  function accept(raw, caretAt) {
    var c = clean(raw), said = [];
    if (c.left.length) said.push(fmt(W.leftOut, {chars: quoted(c.left), n: vocab.length}));
    var kept = c.text, before = caretAt === undefined ? kept.length : clean(raw.slice(0, caretAt)).text.length;
    if (kept.length > MAX) {             // kept holds ASCII only: its length counts characters
      said.push(fmt(W.refused, {max: MAX}));
      if (text.length >= MAX) { before -= kept.length - text.length; kept = text; } else kept = kept.slice(0, MAX);
    }
    before = Math.max(0, Math.min(kept.length, before));
    if (kept === text && box.value === text && !said.length) return;
    if (box.value !== kept) {
      box.value = kept;
      box.setSelectionRange(before, before);
    }
    note.textContent = said.join(" ");
    if (kept !== text) { text = kept; show(); }
  }
  box.addEventListener("input", function () { accept(box.value, box.selectionStart); });

  // Continue: n characters, each the argmax (τ = 0) or drawn from softmax(logits / τ), until MAX.
  go.addEventListener("click", function () {
    var n = Math.max(1, Math.min(MAX, parseInt(nBox.value, 10) || 1)), tau = parseFloat(temp.value);
    var rand = seeded(parseInt(seedBox.value, 10) || 0), ids = Array.from(text).map(function (ch) { return known[ch]; });
    if (!ids.length) { note.textContent = W.first; return; }
    var added = 0;
    for (; added < n && ids.length < MAX; added++) {
      var logits = model.forward(ids).logits, pick = 0, i;
      if (tau === 0) {
        for (i = 1; i < logits.length; i++) if (logits[i] > logits[pick]) pick = i;
      } else {
        var z = [];
        for (i = 0; i < logits.length; i++) z.push(logits[i] / tau);
        var p = softmaxRow(z), u = rand(), acc = 0;
        pick = p.length - 1;
        for (i = 0; i < p.length; i++) { acc += p[i]; if (u < acc) { pick = i; break; } }
      }
      ids.push(pick);
    }
    text = ids.map(function (i) { return vocab[i]; }).join("");
    box.value = text;
    note.textContent = fmt(added === 1 ? W.addedOne : W.added, {n: added}) +
      (added < n ? fmt(W.stopped, {max: MAX}) : ".");
    show();
  });

  // What the book's test reads: the numbers behind what is shown, at full precision.
  root.attnlibLive = {
    text: function () { return text; },
    probs: function () { return probs && probs.slice(); },
    weights: function () {
      return Pall && Pall.map(function (heads) {
        return heads.map(function (Ph) {
          return Ph.map(function (row) { return row.concat(new Array(Ph.length - row.length).fill(0)); });
        });
      });
    }
  };
  pressed();
  accept(data.text);
  note.textContent = "";
};
