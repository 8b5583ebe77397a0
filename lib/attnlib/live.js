/* attnlib.live: chapter 8's character model, run in the page on the reader's text. Inlined by attnlib/live.py
   before explore.js, which finds the figure, draws the attention with the view every figure shares, and calls
   window.attnlibLive(root, data, kit) with its pieces (kit). The model: a Pre-Norm GPT with RoPE (attnlib.GPT),
   from float16 weights in base64; every value is kept in float32 (Float32Array, Math.fround), as the library's
   float32 tensors are, and a dot product is summed in double first. */
window.attnlibLive = window.attnlibLive || (function () {
  "use strict";
  function liveModel(m, softmaxRow) {
    var c = m.config, d = c.d_model, h = c.h, dh = d / h, dff = c.d_ff, V = m.vocab.length;
    var bin = atob(m.weights), u8 = new Uint8Array(bin.length);
    for (var b = 0; b < bin.length; b++) u8[b] = bin.charCodeAt(b);
    var dv = new DataView(u8.buffer), W = {};
    function half(u) {             // IEEE 754 binary16 → number
      var s = u & 0x8000 ? -1 : 1, e = (u >> 10) & 31, f = u & 1023;
      if (e === 0) return s * f * Math.pow(2, -24);
      if (e === 31) return f ? NaN : s * Infinity;
      return s * (1 + f / 1024) * Math.pow(2, e - 15);
    }
    m.tensors.forEach(function (t) {
      var n = t[1].reduce(function (a, x) { return a * x; }, 1), a = new Float32Array(n);
      for (var k = 0; k < n; k++) a[k] = half(dv.getUint16(2 * (t[2] + k), true));
      W[t[0]] = a;
    });
    var F = Math.fround;
    // x (T, n_in) → x Wᵀ + b (T, n_out), W as nn.Linear keeps it: (n_out, n_in).
    function linear(x, T, nIn, w, bias, nOut) {
      var y = new Float32Array(T * nOut);
      for (var t = 0; t < T; t++) {
        for (var o = 0; o < nOut; o++) {
          var s = 0, xo = t * nIn, wo = o * nIn;
          for (var k = 0; k < nIn; k++) s += x[xo + k] * w[wo + k];
          y[t * nOut + o] = bias ? F(F(s) + bias[o]) : s;
        }
      }
      return y;
    }
    function layerNorm(x, T, g, beta) {
      var y = new Float32Array(T * d);
      for (var t = 0; t < T; t++) {
        var mean = 0, v = 0, k;
        for (k = 0; k < d; k++) mean += x[t * d + k];
        mean /= d;
        for (k = 0; k < d; k++) v += (x[t * d + k] - mean) * (x[t * d + k] - mean);
        var r = 1 / Math.sqrt(v / d + c.eps);
        for (k = 0; k < d; k++) y[t * d + k] = F(F((x[t * d + k] - mean) * r) * g[k]) + beta[k];
      }
      return y;
    }
    // erf to about 1e-15: its Taylor series below 3, the continued fraction of erfc above (GELU(x) = x Φ(x)).
    function erf(x) {
      var a = Math.abs(x), s;
      if (a < 3) {
        var term = a, sum = a, n = 0;
        while (Math.abs(term) > 1e-17 * Math.abs(sum)) { n++; term *= -a * a / n; sum += term / (2 * n + 1); }
        s = 2 / Math.sqrt(Math.PI) * sum;
      } else {
        var f = 0;
        for (var k = 60; k >= 1; k--) f = k / 2 / (a + f);
        s = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f);
      }
      return x < 0 ? -s : s;
    }
    // RoPE: pair (2f, 2f+1) of each head turned by t · base^(−2f/d_head); angles in double, cos and sin in float32.
    var cos = new Float32Array(c.max_T * dh / 2), sin = new Float32Array(c.max_T * dh / 2);
    for (var t0 = 0; t0 < c.max_T; t0++) {
      for (var f0 = 0; f0 < dh / 2; f0++) {
        var th = t0 * Math.pow(c.rope_base, -2 * f0 / dh);
        cos[t0 * dh / 2 + f0] = Math.cos(th);
        sin[t0 * dh / 2 + f0] = Math.sin(th);
      }
    }
    function rope(x, n, first, off) {       // rows of x are positions first … first + n − 1
      for (var r = 0; r < n; r++) {
        for (var f = 0; f < dh / 2; f++) {
          var co = cos[(first + r) * dh / 2 + f], si = sin[(first + r) * dh / 2 + f];
          for (var hh = 0; hh < h; hh++) {
            var p = r * 3 * d + off + hh * dh + 2 * f, e = x[p], od = x[p + 1];
            x[p] = F(F(e * co) - F(od * si));
            x[p + 1] = F(F(e * si) + F(od * co));
          }
        }
      }
    }
    // The positions of the text that did not change keep their K, V and weights, as generate's KV cache does:
    // with the causal mask, row i depends on tokens 0 … i only. A keystroke at the end computes one row.
    var cache = {ids: [], K: [], V: [], P: [], last: new Float32Array(c.max_T * d)};
    for (var l0 = 0; l0 < c.L; l0++) {
      cache.K.push(new Float32Array(c.max_T * d));
      cache.V.push(new Float32Array(c.max_T * d));
      cache.P.push([]);
      for (var h0 = 0; h0 < h; h0++) cache.P[l0].push([]);
    }
    // ids (T,) → {logits (V,) of the token after the last, weights() → P[l][head] (T rows)}.
    function forward(ids) {
      var T = ids.length, k0 = 0, k, t, i, j;
      while (k0 < T && k0 < cache.ids.length && ids[k0] === cache.ids[k0]) k0++;
      var n = T - k0, x = new Float32Array(n * d), scale = Math.sqrt(dh);
      for (t = 0; t < n; t++) for (k = 0; k < d; k++) x[t * d + k] = W["embed.table"][ids[k0 + t] * d + k];
      for (var l = 0; l < c.L && n; l++) {
        var p = "blocks." + l + ".", K = cache.K[l], Vv = cache.V[l];
        var a = layerNorm(x, n, W[p + "ln_1.weight"], W[p + "ln_1.bias"]);
        var qkv = linear(a, n, d, W[p + "attn.W_QKV.weight"], W[p + "attn.W_QKV.bias"], 3 * d);
        rope(qkv, n, k0, 0);
        rope(qkv, n, k0, d);
        for (t = 0; t < n; t++) {
          for (k = 0; k < d; k++) {
            K[(k0 + t) * d + k] = qkv[t * 3 * d + d + k];
            Vv[(k0 + t) * d + k] = qkv[t * 3 * d + 2 * d + k];
          }
        }
        var out = new Float32Array(n * d);
        for (var hh = 0; hh < h; hh++) {
          var Ph = cache.P[l][hh], o = hh * dh;
          Ph.length = k0;
          for (t = 0; t < n; t++) {
            i = k0 + t;
            var z = [];
            for (j = 0; j <= i; j++) {
              var s = 0;
              for (k = 0; k < dh; k++) s += qkv[t * 3 * d + o + k] * K[j * d + o + k];
              z.push(F(F(s) / scale));                 // Z = S / sqrt(d_head), S = q_i · k_j; j > i is masked
            }
            var row = softmaxRow(z);
            for (k = 0; k < dh; k++) {
              var acc = 0;
              for (j = 0; j <= i; j++) acc += F(row[j]) * Vv[j * d + o + k];
              out[t * d + o + k] = acc;                // heads side by side: merge_heads
            }
            Ph.push(row);
          }
        }
        var A = linear(out, n, d, W[p + "attn.W_O.weight"], W[p + "attn.W_O.bias"], d);
        for (k = 0; k < n * d; k++) x[k] = F(x[k] + A[k]);
        var m2 = layerNorm(x, n, W[p + "ln_2.weight"], W[p + "ln_2.bias"]);
        var u = linear(m2, n, d, W[p + "mlp.W_1.weight"], W[p + "mlp.W_1.bias"], dff);
        for (k = 0; k < u.length; k++) u[k] = F(u[k] * 0.5 * (1 + erf(u[k] / Math.SQRT2)));
        var Fo = linear(u, n, dff, W[p + "mlp.W_2.weight"], W[p + "mlp.W_2.bias"], d);
        for (k = 0; k < n * d; k++) x[k] = F(x[k] + Fo[k]);
      }
      cache.last.set(x, k0 * d);                       // X_L of the new rows
      cache.ids = ids.slice();
      var lastRow = layerNorm(cache.last.subarray((T - 1) * d, T * d), 1, W["ln_f.weight"], W["ln_f.bias"]);
      return {logits: linear(lastRow, 1, d, W["head.weight"], null, V), weights: function () { return weights(T); }};
    }
    // P[l][head]: row i holds the i + 1 weights of keys 0 … i (the masked keys, j > i, are left out).
    function weights(T) {
      return cache.P.map(function (heads) { return heads.map(function (Ph) { return Ph.slice(0, T); }); });
    }
    return {forward: forward};
  }
  // A seeded generator of numbers in [0, 1) (mulberry32): the same seed draws the same continuation.
  function seeded(seed) {
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6D2B79F5) >>> 0;
      var t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  function liveFigure(root, data, kit) {
    var el = kit.el, clear = kit.clear, place = kit.place, softmaxRow = kit.softmaxRow, rgb = kit.rgb;
    var MASKED = kit.MASKED, slider = kit.slider;
    var vocab = data.vocab, chars = data.labels, MAX = data.maxChars, known = Object.create(null);
    vocab.forEach(function (ch, i) { known[ch] = i; });
    var model = liveModel(data, softmaxRow), st = data.state, text = "", out = null, probs = null, Pall = null;
    if (data.title) place(el("div", "ax-title", data.title));

    // The reader's text: a character the model never saw is left out (A–Z become a–z), and the page says so.
    var form = el("div", "ax-live-input");
    var boxLabel = el("label", "ax-live-label", "Your text (" + MAX + " characters at most)");
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
    var nLabel = el("label", "ax-control", "characters "), nBox = el("input", "ax-live-n");
    nBox.type = "number";
    nBox.min = "1";
    nBox.max = String(MAX);
    nBox.value = String(data.gen.n);
    nLabel.appendChild(nBox);
    gen.appendChild(nLabel);
    var r = data.tempRange;
    var temp = slider(gen, "ax-live-temp", "temperature \u03C4 ", r[0], r[1], r[2], data.gen.temperature,
                      function () { tempHelp(); });
    var sLabel = el("label", "ax-control", "seed "), seedBox = el("input", "ax-live-seed");
    seedBox.type = "number";
    seedBox.min = "0";
    seedBox.value = String(data.gen.seed);
    sLabel.appendChild(seedBox);
    gen.appendChild(sLabel);
    var go = el("button", "ax-live-go", "Continue");
    go.type = "button";
    gen.appendChild(go);
    var tauNote = el("p", "ax-live-tau");
    place(gen);
    place(tauNote);
    function tempHelp() {
      var tau = parseFloat(temp.value);
      tauNote.textContent = tau === 0 ? "\u03C4 = 0: each new character is the most likely one (argmax)." :
        "\u03C4 = " + tau.toFixed(2) + ": each new character is drawn from softmax(logits / \u03C4) with the seed's " +
        "generator; the same text, \u03C4 and seed give the same characters.";
    }
    tempHelp();

    // Every head at once: one small picture per block and head; pressing one shows it in the heatmap below.
    var overview = el("div", "ax-live-heads");
    overview.setAttribute("role", "group");
    overview.setAttribute("aria-label", "every head at once: pick one for the heatmap");
    var thumbs = [];
    for (var l = 0; l < data.config.L; l++) {
      var line = el("div", "ax-live-row");
      line.appendChild(el("span", "ax-live-rowname", "block " + l));
      for (var hh = 0; hh < data.config.h; hh++) {
        var btn = el("button", "ax-live-thumb"), cv = el("canvas");
        btn.type = "button";
        btn.setAttribute("aria-label", "block " + l + " head " + hh);
        btn.setAttribute("data-layer", l);
        btn.setAttribute("data-head", hh);
        cv.setAttribute("aria-hidden", "true");
        btn.appendChild(cv);
        btn.appendChild(el("span", "ax-live-thumbname", "head " + hh));
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
    function caption(label) {
      return label + " on the text above. Rows: queries i; columns: keys j; 3 decimals; \u2014: a future key, " +
        "masked (weight 0).";
    }
    st.causal = true;
    var v = kit.attentionView({L: data.config.L, h: data.config.h, layerLabel: "block", st: st, bar: bar,
                           weights: function () { return Pall[st.layer][st.head]; }, caption: caption,
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
      return list.map(function (ch) { return "\u201C" + (ch === "\t" ? "tab" : ch) + "\u201D"; }).join(" ");
    }
    function show() {
      var ids = Array.from(text).map(function (ch) { return known[ch]; });
      count.textContent = ids.length + " / " + MAX;
      root.classList.toggle("ax-live-empty", !ids.length);
      if (!ids.length) {
        out = probs = Pall = null;
        clear(top);
        choices = [];
        nextTitle.textContent = "Type a character to see what the model predicts.";
        v.build([]);
        return;
      }
      out = model.forward(ids);
      Pall = out.weights();
      probs = softmaxRow(Array.from(out.logits));
      var order = probs.map(function (p, i) { return i; });
      order.sort(function (a, b) { return probs[b] - probs[a] || a - b; });
      nextTitle.textContent = "The next character after \u201C" + Array.from(text).slice(-12).map(shown).join("") +
        "\u201D, the model's ten most likely:";
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
        var said = "\u201C" + (vocab[i] === " " ? "space" : vocab[i] === "\n" ? "new line" : vocab[i]) + "\u201D: " + p;
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
    for (var w = 0; w <= 1024; w++) shades[w] = pack(rgb(w / 1024));
    var GREY = pack(MASKED), WHITE = pack([255, 255, 255]);
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
      if (c.left.length) said.push("Left out " + quoted(c.left) + ": the model knows only its " + vocab.length +
                                   " characters (a\u2013z, space, new line, digits 1 6 7 8 and . , ; : ! ? ' \" ( ) -).");
      var kept = c.text, before = caretAt === undefined ? kept.length : clean(raw.slice(0, caretAt)).text.length;
      if (kept.length > MAX) {             // kept holds ASCII only: its length counts characters
        said.push("Refused: " + MAX + " characters at most, so that the heatmap stays readable.");
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
      if (!ids.length) { note.textContent = "Type a character first: the model continues a text."; return; }
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
      note.textContent = "Added " + added + " character" + (added === 1 ? "" : "s") +
        (added < n ? " (stopped at " + MAX + ", the most the box holds)." : ".");
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
  }

  return liveFigure;
})();
