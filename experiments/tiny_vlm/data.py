"""Synthetic images and questions, generated on the fly from a seed, never stored.

An image is a grid of Hm x Wm cells; 3-8 cells hold an object (one of 8 colours x 4 shapes,
no duplicates), the rest are empty. A patch token's input is the content of its cell only
(`cell_features`): nothing about where the cell is enters the embedding, so all spatial
information must come from the rotary positions.

Every position is the sum of up to FEATURES embeddings. A patch is OBJECT + colour + shape
(or EMPTY); a question is one such composite token too, the sum of its words, so that what is
learned is the spatial mechanism rather than parsing. A sequence (training layout):

    BOS filler*  VS patch*Hm*Wm VE  (question ASK)*n

The answer is predicted at ASK and carries the loss; nothing else does. Each (question, ASK)
pair sees the shared prefix (BOS .. VE) and itself, never another question (the model's
attention mask, `Example.block`), and every pair has the rotary positions of the first
(model.collate): each question is answered exactly as if it were asked alone after the image,
and no answer can be copied from an earlier one. (Measured: with a plain causal mask and the answers
in the sequence, 58% of the neighbour questions repeated an earlier one of the same sequence,
and the model learned to copy those answers instead of looking at the image.)
Question types (the words summed into the question token; answers in brackets):

    neighbour  DIR + colour            [colour | none]  "what is left of the red object?"
    lookup     AT + row r + column c   [colour | none]  "what colour is at row r, column c?"
    relation   WHERE + colour + colour'  [above-left | above-right | below-left | below-right]
                                        "where is the red object from the blue one?"
    count      COUNT + colour          [0..4]           "how many red objects?"

Neighbour and relation name objects whose colour is unique in the image, by colour alone
(DIR: left/right/above/below; the second object of a relation has its own colour' words, so
that the sum keeps the order). A relation is asked when the two objects differ in both row and
column: it is the issue's "left of? above of?" pair answered at once, with four balanced answers
instead of a yes/no whose majority is 1/2 (docs). Finding an object is then the same
content match that count needs; what is left to learn is the spatial part (docs).

Question-first layout (evaluation only): BOS filler* question VS patches VE ASK.

Answers are balanced per question: the answer class is drawn first (uniformly among the
classes the image allows, "none" / count "0" at most 1/4), then a question with that answer.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, List, Optional, Sequence, Tuple

# ------------------------------------------------------------------ vocabulary ---
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
SHAPES = ("circle", "square", "triangle", "star")
DIRECTIONS = ("left", "right", "above", "below")
QUADRANTS = ("above-left", "above-right", "below-left", "below-right")
QUESTION_TYPES = ("neighbour", "lookup", "relation", "count")
MAX_COORD = 16          # row / column words 0..15
MAX_COUNT = 4           # a colour can be on at most 4 objects (4 shapes)
N_FILLER = 32
FEATURES = 5            # embeddings summed per position (a relation question has 5 words)

PAD, BOS, VS, VE, IMG, VID, ASK = range(7)
_next = 7
def _block(n: int) -> int:
    global _next
    first, _next = _next, _next + n
    return first
Q_DIR = _block(len(DIRECTIONS))
Q_AT = _block(1)
Q_REL = _block(1)
Q_COUNT = _block(1)
NONE = _block(1)
QUAD0 = _block(len(QUADRANTS))   # relation answers
COLOUR0 = _block(len(COLOURS))
SHAPE0 = _block(len(SHAPES))
COLOUR2 = _block(len(COLOURS))   # the second object of a relation
ROW0 = _block(MAX_COORD)
COL0 = _block(MAX_COORD)
DIGIT0 = _block(MAX_COUNT + 1)   # count answers
FILLER0 = _block(N_FILLER)
EMPTY = _block(1)     # an empty cell's patch
OBJECT = _block(1)    # an object's patch (plus its colour and shape embeddings)
VOCAB_SIZE = _next

TOKEN_NAMES = (["<pad>", "<bos>", "<vs>", "<ve>", "<img>", "<vid>", "?"]
               + [f"Q:{d}" for d in DIRECTIONS] + ["Q:at", "Q:where", "Q:count", "none"] + list(QUADRANTS) + list(COLOURS) + list(SHAPES)
               + [c + "'" for c in COLOURS]
               + [f"row{i}" for i in range(MAX_COORD)] + [f"col{i}" for i in range(MAX_COORD)]
               + [str(i) for i in range(MAX_COUNT + 1)] + [f"w{i}" for i in range(N_FILLER)]
               + ["<empty>", "<object>"])
assert len(TOKEN_NAMES) == VOCAB_SIZE

Cell = Optional[Tuple[int, int]]  # (colour index, shape index) or None


@dataclasses.dataclass(frozen=True)
class Image:
    h: int
    w: int
    cells: Tuple[Cell, ...]   # raster order, h * w

    def at(self, r: int, c: int) -> Cell:
        return self.cells[r * self.w + c] if 0 <= r < self.h and 0 <= c < self.w else None

    def where(self, obj: Tuple[int, int]) -> Tuple[int, int]:
        j = self.cells.index(obj)
        return divmod(j, self.w)

    @property
    def objects(self) -> List[Tuple[int, int]]:
        return [c for c in self.cells if c is not None]


def cell_features(cell: Cell) -> Tuple[int, ...]:
    """The embeddings summed for a patch: a function of the cell's content only."""
    if cell is None:
        return _pad((EMPTY,))
    return _pad((OBJECT, COLOUR0 + cell[0], SHAPE0 + cell[1]))


def _pad(ids: Sequence[int]) -> Tuple[int, ...]:
    return tuple(ids) + (PAD,) * (FEATURES - len(ids))


def make_image(rng: random.Random, h: int, w: int, objects: Tuple[int, int]) -> Image:
    """3-8 objects (objects=(lo, hi)) on distinct cells. Colours come from a palette of
    ceil(n/2) colours so that some colour repeats and count answers 0..3 all occur."""
    n = rng.randint(*objects)
    n = min(n, h * w, len(COLOURS) * len(SHAPES))
    palette = rng.sample(range(len(COLOURS)), min(len(COLOURS), max(1, (n + 1) // 2)))
    chosen: set = set()
    while len(chosen) < n:
        chosen.add((rng.choice(palette), rng.randrange(len(SHAPES))))
    objs = sorted(chosen)
    rng.shuffle(objs)
    cells: List[Cell] = [None] * (h * w)
    for j, obj in zip(rng.sample(range(h * w), n), objs):
        cells[j] = obj
    return Image(h, w, tuple(cells))


# ------------------------------------------------------------------- questions ---
@dataclasses.dataclass(frozen=True)
class Question:
    kind: str                 # one of QUESTION_TYPES
    tokens: Tuple[int, ...]   # the words summed into the question token (type word first)
    answer: int               # the answer token
    cell: Optional[Tuple[int, int]] = None   # lookup: the target cell (row, column)


_DELTA = {"left": (0, -1), "right": (0, 1), "above": (-1, 0), "below": (1, 0)}


def _unique_colour(img: Image) -> List[Tuple[int, int]]:
    """Objects whose colour no other object has: a question names them by colour alone."""
    n = [0] * len(COLOURS)
    for o in img.objects:
        n[o[0]] += 1
    return [o for o in img.objects if n[o[0]] == 1]


def _answer_of(cell: Cell) -> int:
    return NONE if cell is None else COLOUR0 + cell[0]


def candidates(img: Image, kind: str) -> List[Question]:
    """Every question of one type this image allows, with its answer."""
    out: List[Question] = []
    if kind == "neighbour":
        for obj in _unique_colour(img):
            r, c = img.where(obj)
            for d, name in enumerate(DIRECTIONS):
                dr, dc = _DELTA[name]
                out.append(Question(kind, (Q_DIR + d, COLOUR0 + obj[0]), _answer_of(img.at(r + dr, c + dc))))
    elif kind == "lookup":
        for r in range(img.h):
            for c in range(img.w):
                if r < MAX_COORD and c < MAX_COORD:
                    out.append(Question(kind, (Q_AT, ROW0 + r, COL0 + c), _answer_of(img.at(r, c)), (r, c)))
    elif kind == "relation":
        objs = _unique_colour(img)
        for a in objs:
            for b in objs:
                if a == b:
                    continue
                (ra, ca), (rb, cb) = img.where(a), img.where(b)
                if ra != rb and ca != cb:
                    quadrant = 2 * (ra > rb) + (ca > cb)
                    out.append(Question(kind, (Q_REL, COLOUR0 + a[0], COLOUR2 + b[0]), QUAD0 + quadrant))
    elif kind == "count":
        for colour in range(len(COLOURS)):
            n = sum(1 for o in img.objects if o[0] == colour)
            out.append(Question(kind, (Q_COUNT, COLOUR0 + colour), DIGIT0 + n))
    else:
        raise ValueError(f"unknown question type {kind!r}")
    return out


NONE_SHARE = 0.25  # "none" (count: "0") is drawn at most this often: it cannot win by itself


def balanced_question(rng: random.Random, img: Image, kind: str,
                      used: Optional[set] = None) -> Optional[Question]:
    """Draws the answer class first, uniformly over the classes this image allows ("none",
    or "0" for count, at most NONE_SHARE), then a question with that answer, preferring one
    not in `used`; None if the type has no other answer here."""
    by_answer: Dict[int, List[Question]] = {}
    for q in candidates(img, kind):
        by_answer.setdefault(q.answer, []).append(q)
    empty = DIGIT0 if kind == "count" else NONE
    others = sorted(a for a in by_answer if a != empty)
    if not others:
        return None
    if empty in by_answer and rng.random() < min(NONE_SHARE, 1.0 / (len(others) + 1)):
        pool = by_answer[empty]
    else:
        pool = by_answer[rng.choice(others)]
    fresh = [q for q in pool if used is None or q not in used]
    return rng.choice(fresh or pool)


def type_counts(rng: random.Random, questions: int, mix: Sequence[float]) -> List[int]:
    """How many questions of each type a sequence gets: the weights' shares, remainders drawn."""
    total = sum(mix)
    exact = [questions * w / total for w in mix]
    counts = [int(x) for x in exact]
    rest = questions - sum(counts)
    weights = [x - c for x, c in zip(exact, counts)]
    for _ in range(rest):
        t = rng.choices(range(len(mix)), [w if w > 0 else 0 for w in weights])[0] if sum(weights) > 0 else \
            rng.choices(range(len(mix)), mix)[0]
        counts[t] += 1
        weights[t] = 0.0
    return counts


# ---------------------------------------------------------------------- layouts ---
@dataclasses.dataclass(frozen=True)
class Layout:
    """How one split's sequences are laid out."""
    name: str
    grids: Tuple[Tuple[int, int], ...]           # (Hm, Wm) cell grids
    filler: Tuple[int, int] = (0, 16)            # filler tokens before the image
    questions: int = 8                           # questions per sequence (question-first: 1)
    question_first: bool = False                 # the question before the image
    objects: Tuple[int, int] = (3, 8)
    mix: Tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # weights of QUESTION_TYPES


@dataclasses.dataclass
class Example:
    feats: List[Tuple[int, ...]]   # per position, FEATURES ids whose embeddings are summed
    grid: Tuple[int, int]
    ask: List[int]                 # positions of ASK tokens (the answer is predicted there)
    questions: List[Question]
    image_start: int               # position of VS
    prefix: int                    # positions [0, prefix) are seen by every question

    def block(self, pos: int) -> int:
        """Which question a position belongs to (-1: the shared prefix). Training layout:
        question i is the pair (question, ASK) at prefix + 2i."""
        return -1 if pos < self.prefix else (pos - self.prefix) // 2

    @property
    def tokens(self) -> List[int]:
        """The first id of every position (the type word of a question, OBJECT / EMPTY for a
        patch): what get_rope_index reads, after patches become the image token."""
        return [f[0] for f in self.feats]


def make_example(rng: random.Random, layout: Layout) -> Example:
    h, w = rng.choice(layout.grids)
    counts = type_counts(rng, layout.questions, layout.mix)
    for attempt in range(10_000):
        # The image must allow every asked type an informative answer; otherwise another image
        # (so the mix is what was asked for: images without unique colours or neighbours
        # would otherwise turn into count-only sequences).
        img = make_image(rng, h, w, layout.objects)
        qs: List[Question] = []
        for kind, n in zip(QUESTION_TYPES, counts):
            used: set = set()
            for _ in range(n):
                q = balanced_question(rng, img, kind, used)
                if q is None:
                    break
                used.add(q)
                qs.append(q)
        if len(qs) == layout.questions:
            break
    else:
        raise ValueError(f"layout {layout.name}: no {h}x{w} image with {layout.objects} objects allows "
                         f"every question type of mix {layout.mix}")
    rng.shuffle(qs)
    feats = [_pad((BOS,))] + [_pad((FILLER0 + rng.randrange(N_FILLER),))
                              for _ in range(rng.randint(*layout.filler))]
    ask: List[int] = []
    if layout.question_first:
        assert len(qs) == 1
        feats.append(_pad(qs[0].tokens))
    image_start = len(feats)
    feats.append(_pad((VS,)))
    feats += [cell_features(cell) for cell in img.cells]
    feats.append(_pad((VE,)))
    prefix = len(feats) if not layout.question_first else len(feats) + 1
    for q in qs:
        if not layout.question_first:
            feats.append(_pad(q.tokens))
        ask.append(len(feats))
        feats.append(_pad((ASK,)))
    return Example(feats, (h, w), ask, qs, image_start, prefix)


def example_rng(seed: int, stream: str, step: int, index: int) -> random.Random:
    """Each example has its own generator, so any shard of a batch is the same data
    whichever process (DDP rank) makes it."""
    return random.Random(f"{seed}/{stream}/{step}/{index}")


def make_examples(seed: int, stream: str, step: int, indices: Sequence[int], layout: Layout,
                  one_grid: bool = False) -> List[Example]:
    """Examples `indices` of batch `step`. one_grid: the whole batch (every shard of it) shares
    one grid drawn from (seed, stream, step), which saves the padding of mixed grid sizes."""
    if one_grid:
        grid = random.Random(f"{seed}/{stream}/{step}/grid").choice(layout.grids)
        layout = dataclasses.replace(layout, grids=(grid,))
    return [make_example(example_rng(seed, stream, step, i), layout) for i in indices]
