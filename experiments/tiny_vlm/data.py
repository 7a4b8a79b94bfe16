"""Synthetic images and questions, generated on the fly from a seed, never stored.

An image is a grid of Hm x Wm cells; 3-8 cells hold an object (one of 8 colours x 4 shapes,
no duplicates), the rest are empty. A patch token's input is the content of its cell only
(`cell_features`): nothing about where the cell is enters the embedding, so all spatial
information must come from the rotary positions.

Every position is the sum of up to FEATURES embeddings. A patch is OBJECT + colour + shape
(or EMPTY); a question is one such composite token too, the sum of its words, so that what is
learned is the spatial mechanism rather than parsing. A sequence (training layout):

    BOS filler*  VS patch*Hm*Wm VE  gap-filler*  (question ASK)*n

The answer is predicted at ASK and carries the loss; nothing else does. Each (question, ASK)
pair sees the shared prefix (BOS .. the last gap filler) and itself, never another question
(the model's attention mask, `Example.block`), and every pair has the rotary positions of the
first (model.collate): each question is answered exactly as if it were asked alone after the
image, and no answer can be copied from an earlier one. (Measured: with a plain causal mask and
the answers in the sequence, 58% of the neighbour questions repeated an earlier one of the same
sequence, and the model learned to copy those answers instead of looking at the image.)

A layout draws f filler words (`Layout.filler`) and puts the last `Layout.gap` of them between
the image and the questions: for the same draws, gap k keeps the sequence length and moves every
question k tokens further from the image (k(1,1,1) in every geometry, as text positions advance
by one on every axis). A layout with a gap range (`Layout.gap_range` lo, hi; (0, 0): none) draws
the gap instead, uniformly from lo .. min(hi, f): per sequence, or, for a training batch
(`make_examples(one_shape=True)`), once per batch with its grid and filler length.

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

Images are drawn for the questions a sequence asks (`draw_image`): the contents are built to
allow them (enough colours held by one object only), and the placement is drawn uniformly among
the placements that allow them (a neighbour question needs a unique-colour object beside another
object, a relation two unique-colour objects in different rows and columns), so that given its
contents every allowed placement is equally likely: what the content-only baseline (content.py)
averages over.

Question-first layout (evaluation only): BOS filler* question VS patches VE gap-filler* ASK.

Answers are balanced per question: the answer class is drawn first (uniformly among the
classes the image allows, "none" / count "0" at most 1/4), then a question with that answer.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

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


def by_answer(img: Image, kind: str) -> Dict[int, List[Question]]:
    """The questions of one type this image allows, grouped by their answer."""
    groups: Dict[int, List[Question]] = {}
    for q in candidates(img, kind):
        groups.setdefault(q.answer, []).append(q)
    return groups


def class_probabilities(groups: Dict[int, object], kind: str) -> Dict[int, float]:
    """How likely each answer class is to be drawn for this image (`balanced_question`):
    uniform over the informative answers, "none" (count: "0") at min(NONE_SHARE, 1/(k+1)) when
    the image allows it; empty when the type has no informative answer here."""
    empty = DIGIT0 if kind == "count" else NONE
    others = [a for a in groups if a != empty]
    if not others:
        return {}
    p_empty = min(NONE_SHARE, 1.0 / (len(others) + 1)) if empty in groups else 0.0
    probs = {a: (1.0 - p_empty) / len(others) for a in others}
    if p_empty:
        probs[empty] = p_empty
    return probs


def question_probabilities(img: Image, kind: str) -> Dict[Tuple[int, ...], Tuple[int, float]]:
    """question tokens -> (answer, probability that `balanced_question` asks it) for one image:
    the answer class's probability shared equally by the questions with that answer."""
    groups = by_answer(img, kind)
    out = {}
    for a, p in class_probabilities(groups, kind).items():
        for q in groups[a]:
            out[q.tokens] = (a, p / len(groups[a]))
    return out


def lookup_probability(img: Image, q: Question) -> Tuple[int, float]:
    """question_probabilities(img, "lookup")[q.tokens] without building every lookup question:
    (the cell's answer, its class's probability over the cells with that answer)."""
    sizes: Dict[int, int] = {}
    for cell in img.cells:
        a = _answer_of(cell)
        sizes[a] = sizes.get(a, 0) + 1
    a = _answer_of(img.at(q.tokens[1] - ROW0, q.tokens[2] - COL0))
    return a, class_probabilities(sizes, "lookup")[a] / sizes[a]


def balanced_question(rng: random.Random, img: Image, kind: str, used: Optional[set] = None,
                      groups: Optional[Dict[int, List[Question]]] = None) -> Optional[Question]:
    """Draws the answer class first, uniformly over the classes this image allows ("none",
    or "0" for count, at most NONE_SHARE), then a question with that answer, preferring one
    not in `used`; None if the type has no other answer here. `groups`: by_answer(img, kind),
    when the caller has it."""
    groups = by_answer(img, kind) if groups is None else groups
    empty = DIGIT0 if kind == "count" else NONE
    others = sorted(a for a in groups if a != empty)
    if not others:
        return None
    if empty in groups and rng.random() < min(NONE_SHARE, 1.0 / (len(others) + 1)):
        pool = groups[empty]
    else:
        pool = groups[rng.choice(others)]
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


# ---------------------------------------------------------------------- images ---
@dataclasses.dataclass(frozen=True)
class Needs:
    """What an image must allow for the question types a sequence asks: a neighbour question
    needs an object of a unique colour with an object beside it, a relation question two
    objects of unique colours in different rows and columns (lookup and count: any image)."""
    neighbour: bool = False
    relation: bool = False

    @staticmethod
    def of(kinds: Iterable[str]) -> "Needs":
        kinds = set(kinds)
        return Needs(neighbour="neighbour" in kinds, relation="relation" in kinds)

    @property
    def unique_colours(self) -> int:
        return 2 if self.relation else 1 if self.neighbour else 0

    @property
    def min_objects(self) -> int:
        return 2 if self.neighbour or self.relation else 1


def _group_sizes_fit(rest: int, colours: int) -> bool:
    """`rest` objects can share `colours` colours in groups of 2..len(SHAPES)."""
    return rest == 0 or (rest >= 2 and colours >= 1 and rest <= len(SHAPES) * colours)


def make_contents(rng: random.Random, n: int, needs: Needs) -> List[Tuple[int, int]]:
    """n distinct (colour, shape) objects, built to allow the questions: as few colours held by
    one object each as the questions need (u >= needs.unique_colours; 3 objects need 3), the
    other n - u objects in groups of 2-4 of one colour each, so that count answers 0-4 occur.
    (The fewest: every unique colour adds a count answer "1", already the most frequent.)"""
    u = next((u for u in range(needs.unique_colours, min(n, len(COLOURS)) + 1)
              if _group_sizes_fit(n - u, len(COLOURS) - u)), None)
    if u is None:
        raise ValueError(f"{n} objects cannot have {needs.unique_colours} unique colours "
                         f"({len(COLOURS)} colours x {len(SHAPES)} shapes)")
    rest = n - u
    sizes: List[int] = []
    if rest:
        sizes = [2] * rng.randint(-(-rest // len(SHAPES)), min(rest // 2, len(COLOURS) - u))
        for _ in range(rest - 2 * len(sizes)):
            sizes[rng.choice([i for i, k in enumerate(sizes) if k < len(SHAPES)])] += 1
    objs: List[Tuple[int, int]] = []
    for colour, size in zip(rng.sample(range(len(COLOURS)), u + len(sizes)), [1] * u + sizes):
        objs += [(colour, shape) for shape in rng.sample(range(len(SHAPES)), size)]
    rng.shuffle(objs)
    return objs


def allows(img: Image, needs: Needs) -> bool:
    """Whether the placement allows the questions of `needs` (an O(objects) check)."""
    if not (needs.neighbour or needs.relation):
        return True
    unique = [img.where(o) for o in _unique_colour(img)]
    if needs.neighbour and not any(img.at(r + dr, c + dc) is not None
                                   for r, c in unique for dr, dc in _DELTA.values()):
        return False
    if needs.relation and not any(a[0] != b[0] and a[1] != b[1] for a, b in itertools.combinations(unique, 2)):
        return False
    return True


MAX_PLACEMENTS = 10_000


def place(rng: random.Random, objs: Sequence[Tuple[int, int]], h: int, w: int, needs: Needs) -> Tuple[Image, int]:
    """objs on distinct cells of an h x w grid, uniform over the placements that `allows`:
    drawn until one does. Returns the image and how many placements were drawn."""
    for draws in range(1, MAX_PLACEMENTS + 1):
        cells: List[Cell] = [None] * (h * w)
        for j, obj in zip(rng.sample(range(h * w), len(objs)), objs):
            cells[j] = obj
        img = Image(h, w, tuple(cells))
        if allows(img, needs):
            return img, draws
    raise ValueError(f"no placement of {len(objs)} objects on a {h}x{w} grid out of {MAX_PLACEMENTS} "
                     f"allows the questions asked ({needs})")


def placements(objs: Sequence[Tuple[int, int]], h: int, w: int, needs: Needs) -> Iterator[Image]:
    """Every placement `place` can return, each once (all equally likely): for tiny grids."""
    for cells_of in itertools.permutations(range(h * w), len(objs)):
        cells: List[Cell] = [None] * (h * w)
        for j, obj in zip(cells_of, objs):
            cells[j] = obj
        img = Image(h, w, tuple(cells))
        if allows(img, needs):
            yield img


def draw_image(rng: random.Random, h: int, w: int, objects: Tuple[int, int], needs: Needs = Needs()) -> Tuple[Image, int]:
    """An image allowing the questions of `needs`: objects=(lo, hi) objects (uniform, at most
    the grid's cells), contents by make_contents, placement by place. Returns the image and
    the number of placements drawn."""
    n = min(rng.randint(*objects), h * w, len(COLOURS) * len(SHAPES))
    if n < needs.min_objects:
        raise ValueError(f"{n} object(s) on a {h}x{w} grid cannot allow the questions asked ({needs})")
    return place(rng, make_contents(rng, n, needs), h, w, needs)


def make_image(rng: random.Random, h: int, w: int, objects: Tuple[int, int], needs: Needs = Needs()) -> Image:
    return draw_image(rng, h, w, objects, needs)[0]


# ---------------------------------------------------------------------- layouts ---
@dataclasses.dataclass(frozen=True)
class Layout:
    """How one split's sequences are laid out."""
    name: str
    grids: Tuple[Tuple[int, int], ...]           # (Hm, Wm) cell grids
    filler: Tuple[int, int] = (0, 16)            # filler tokens per sequence (lo, hi)
    questions: int = 8                           # questions per sequence (question-first: 1)
    question_first: bool = False                 # the question before the image
    objects: Tuple[int, int] = (3, 8)
    mix: Tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # weights of QUESTION_TYPES
    gap: int = 0                                 # of the filler tokens, how many sit between the image and the questions
    gap_range: Tuple[int, int] = (0, 0)          # the gap drawn from lo .. min(hi, filler drawn); (0, 0): none

    def key(self) -> str:
        """What the sequences are drawn from: every field but the name and the gap. Evaluation
        data are drawn from the stream of this key, so splits that differ only in their gap hold
        the same sequences, and a split is regenerated from its parameters alone. A gap range
        changes the draws, so it is part of the key (when it is not (0, 0), so that the layouts
        without one keep their keys and their data)."""
        grids = ",".join(f"{h}x{w}" for h, w in self.grids)
        mix = ",".join(f"{m:g}" for m in self.mix)
        drawn = f"/gaps={self.gap_range[0]}-{self.gap_range[1]}" if tuple(self.gap_range) != (0, 0) else ""
        return (f"grids={grids}/filler={self.filler[0]}-{self.filler[1]}/questions={self.questions}/"
                f"first={int(self.question_first)}/objects={self.objects[0]}-{self.objects[1]}/mix={mix}" + drawn)

    def draw_gap(self, rng: random.Random, fillers: int) -> int:
        """The gap of a sequence of `fillers` filler tokens: Layout.gap, or, with a gap range
        (lo, hi), uniform over lo .. min(hi, fillers) (lo is at most the layout's fewest
        fillers: checkpoint.check_layout)."""
        lo, hi = self.gap_range
        if (lo, hi) == (0, 0):
            return self.gap
        return rng.randint(lo, max(lo, min(hi, fillers)))


@dataclasses.dataclass
class Example:
    feats: List[Tuple[int, ...]]   # per position, FEATURES ids whose embeddings are summed
    grid: Tuple[int, int]
    ask: List[int]                 # positions of ASK tokens (the answer is predicted there)
    questions: List[Question]
    image_start: int               # position of VS
    prefix: int                    # positions [0, prefix) are seen by every question
    image: Optional[Image] = None
    needs: Needs = Needs()         # what the image was drawn to allow
    draws: int = 1                 # placements drawn for the image

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
    needs = Needs.of(kind for kind, n in zip(QUESTION_TYPES, counts) if n)
    img, draws = draw_image(rng, h, w, layout.objects, needs)
    qs: List[Question] = []
    for kind, n in zip(QUESTION_TYPES, counts):
        groups = by_answer(img, kind) if n else {}
        used: set = set()
        for _ in range(n):
            q = balanced_question(rng, img, kind, used, groups)
            assert q is not None, (kind, img)   # the image was drawn to allow every asked type
            used.add(q)
            qs.append(q)
    rng.shuffle(qs)
    fillers = [FILLER0 + rng.randrange(N_FILLER) for _ in range(rng.randint(*layout.filler))]
    gap = layout.draw_gap(rng, len(fillers))
    if len(fillers) < gap:
        raise ValueError(f"layout {layout.name}: gap {gap} is more than the {len(fillers)} filler tokens drawn "
                         f"(filler {layout.filler[0]}-{layout.filler[1]})")
    before, after = fillers[:len(fillers) - gap], fillers[len(fillers) - gap:]
    feats = [_pad((BOS,))] + [_pad((t,)) for t in before]
    ask: List[int] = []
    if layout.question_first:
        assert len(qs) == 1
        feats.append(_pad(qs[0].tokens))
    image_start = len(feats)
    feats.append(_pad((VS,)))
    feats += [cell_features(cell) for cell in img.cells]
    feats.append(_pad((VE,)))
    feats += [_pad((t,)) for t in after]
    prefix = len(feats) if not layout.question_first else len(feats) + 1
    for q in qs:
        if not layout.question_first:
            feats.append(_pad(q.tokens))
        ask.append(len(feats))
        feats.append(_pad((ASK,)))
    return Example(feats, (h, w), ask, qs, image_start, prefix, img, needs, draws)


def example_rng(seed: int, stream: str, step: int, index: int) -> random.Random:
    """Each example has its own generator, so any shard of a batch is the same data
    whichever process (DDP rank) makes it."""
    return random.Random(f"{seed}/{stream}/{step}/{index}")


def make_examples(seed: int, stream: str, step: int, indices: Sequence[int], layout: Layout,
                  one_shape: bool = False) -> List[Example]:
    """Examples `indices` of batch `step`. one_shape: the whole batch (every shard of it) shares
    one grid and one filler length drawn from (seed, stream, step), so that its sequences have
    one length and no padding (each example's grid and filler length keep their distribution);
    and, with a gap range, one gap, drawn after them from the same generator (a layout without
    one draws nothing more, so its batches are those it always had)."""
    if one_shape:
        rng = random.Random(f"{seed}/{stream}/{step}/grid")
        grid = rng.choice(layout.grids)
        filler = rng.randint(*layout.filler)
        gap = layout.draw_gap(rng, filler)
        layout = dataclasses.replace(layout, grids=(grid,), filler=(filler, filler), gap=gap, gap_range=(0, 0))
    return [make_example(example_rng(seed, stream, step, i), layout) for i in indices]


def targets(img: Image, q: Question) -> List[int]:
    """Raster indices of the cells a question is about: the looked-up cell, the named object(s)
    of a neighbour or relation question, the objects of the counted colour."""
    if q.kind == "lookup":
        return [q.cell[0] * img.w + q.cell[1]]
    if q.kind == "count":
        return [j for j, c in enumerate(img.cells) if c is not None and c[0] == q.tokens[1] - COLOUR0]
    colours = [q.tokens[1] - COLOUR0] + ([q.tokens[2] - COLOUR2] if q.kind == "relation" else [])
    return [j for colour in colours for j, c in enumerate(img.cells) if c is not None and c[0] == colour]
