// The registry the modules of this folder share (kit) and the view they build (v), for `tsc --checkJs`
// (tests/test_explore.py runs it where node and TypeScript are installed). Not shipped: the page needs none of it.
type Words = {[name: string]: string};
type Cell = {i: number, j: number | null};
interface Table {
  shown(): boolean; prepare(): boolean; write(i: number, j: number, text: string): void; name(label: string): void;
}
interface ViewOptions {
  L: number; h: number; layerLabel: string; st: any; words: Words; bar: HTMLElement;
  weights(): number[][]; caption(label: string): string; onSelect?: () => void;
  minCell?: number; lazyTable?: boolean; room?: number; canvas?: boolean;
}
interface View {
  o: ViewOptions; st: any; W: Words; root: HTMLElement; T: number; labels: string[]; P: number[][] | null;
  name?: (i: number) => string; label?: () => string; readout?: HTMLElement;
  stack?: HTMLElement; paper?: HTMLCanvasElement | null; heat?: SVGElement; over?: SVGElement; list?: SVGElement;
  // layout
  g?: {cell: number, font: number, lab: number, margin: number, rowH: number, tokW: number, room: number, key: string} | null;
  cell?: number; margin?: number; rowH?: number; tokW?: number; heatW?: number; heatH?: number; tvW?: number;
  rows?: SVGElement[]; rowLab?: SVGElement[]; colLab?: SVGElement[]; cells?: SVGElement[][]; texts?: SVGElement[][];
  frame?: SVGElement; qframe?: SVGElement; lines?: SVGElement; qTok?: SVGElement[]; kTok?: SVGElement[];
  cellClass?: (i: number, j: number) => string; build?: (labels: string[]) => void;
  // paint
  fresh?: () => void; colour?: (i: number, j: number, fill: string) => void; draw?: () => void; drawLines?: () => void;
  // table
  table?: Table;
  // keys
  focus?: Cell; at?: {i: number, j: number}; atQuery?: number; inHeat?: boolean; inView?: boolean;
  home?: (q: number) => void; roving?: () => void;
}
interface Kit {
  el(tag: string, cls?: string | null, text?: string): any;
  svg(tag: string, attrs: {[k: string]: any}, parent?: Element): SVGElement;
  clear(node: Node): void;
  esc(text: any): string;
  fmt(words: string, values: {[k: string]: any}): string;
  place(root: HTMLElement, node: Node): void;
  softmaxRow(z: number[]): number[];
  slider(bar: Element, cls: string, word: string, lo: number, hi: number, step: number, value: number,
         oninput: (x: number) => void): HTMLInputElement;
  STOPS: number[][]; MASKED: number[];
  css(c: number[]): string; rgb(w: number): number[]; ink(c: number[]): string;
  layout(v: View): void; paint(v: View): void; table(v: View): void; keys(v: View): void;
  attentionView(root: HTMLElement, o: ViewOptions):
    {build(labels: string[]): void, draw(): void, select(layer: number, head: number): void, label(): string};
  storedFigure(root: HTMLElement, data: any): void;
  liveModel(data: any): {forward(ids: number[]): {logits: Float32Array, weights(): number[][][][]}};
  seeded(seed: number): () => number;
  liveFigure(root: HTMLElement, data: any): void;
  start(script: HTMLScriptElement | null): void;
}
interface HTMLElement { attnlibLive?: any }   // what the book's browser test reads
declare var kit: Kit;
declare var script: HTMLScriptElement | null;
