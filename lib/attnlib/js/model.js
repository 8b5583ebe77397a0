// model: chapter 8's character model, run in the page (live.py): a Pre-Norm GPT with RoPE (attnlib.GPT), from
// float16 weights in base64; every value is kept in float32 (Float32Array, Math.fround), as the library's
// float32 tensors are, and a dot product is summed in double first.
kit.liveModel = function (m) {
  var softmaxRow = kit.softmaxRow;
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
};
// A seeded generator of numbers in [0, 1) (mulberry32): the same seed draws the same continuation.
kit.seeded = function (seed) {
  var a = seed >>> 0;
  return function () {
    a = (a + 0x6D2B79F5) >>> 0;
    var t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
};
