//! Packs units (sentences, rows, lines) into chunks of at most `max_tokens`, keeping blocks whole
//! where they fit, adding overlap between prose chunks, and folding short chunks into their
//! neighbours. Sizes are planned from the units' own token counts (prefix sums, so nothing is
//! re-tokenised while a chunk grows); each finished chunk is counted once more for real.

use std::collections::HashMap;
use std::ops::Range;

use super::params::ChunkParams;
use super::split::{self, Piece};
use super::tokens::count_tokens;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnitKind {
    /// Heading text; opens its group's first chunk and is never repeated as overlap.
    Heading,
    /// A sentence, or a word or character run of one; may be repeated as overlap.
    Prose,
    /// A table row or code line; never repeated.
    Row,
}

#[derive(Debug)]
struct Unit<'a> {
    text: &'a str,
    tokens: usize,
    /// Joins this unit to the previous one when both land in one chunk.
    sep: &'a str,
    kind: UnitKind,
    /// Index of the document section the unit comes from.
    section: usize,
    /// Units of one block stay in one chunk when the block fits.
    block: usize,
    /// Chunks never span two groups (two titles).
    group: usize,
}

/// Units in document order, grouped into blocks and groups as they are pushed.
#[derive(Debug, Default)]
pub(super) struct Units<'a> {
    list: Vec<Unit<'a>>,
    block: usize,
    group: usize,
    block_sep: Option<&'a str>,
    /// Blocks that open a chunk of their own, whatever room the one before has left.
    alone: Vec<usize>,
}

impl<'a> Units<'a> {
    pub fn start_group(&mut self) {
        self.group += 1;
    }

    /// Starts a block, joined to what precedes it with `sep`.
    pub fn start_block(&mut self, sep: &'a str) {
        self.block += 1;
        self.block_sep = Some(sep);
    }

    /// Starts a block that opens a chunk of its own (one repeating a table's header).
    pub fn start_block_alone(&mut self, sep: &'a str) {
        self.start_block(sep);
        self.alone.push(self.block);
    }

    pub fn push(&mut self, piece: Piece<'a>, kind: UnitKind, section: usize) {
        self.list.push(Unit {
            text: piece.text,
            tokens: piece.tokens,
            sep: self.block_sep.take().unwrap_or(piece.sep),
            kind,
            section,
            block: self.block,
            group: self.group,
        });
    }
}

/// A finished chunk before it is tied back to the document's sections.
#[derive(Debug)]
pub(super) struct Packed {
    pub content: String,
    pub tokens: usize,
    /// Section of the chunk's first unit.
    pub section: usize,
    /// Section of the chunk's first non-heading unit: a heading belongs to the content below it.
    pub title_section: usize,
}

pub(super) fn pack(all: &Units<'_>, params: &ChunkParams) -> Vec<Packed> {
    let units = all.list.as_slice();
    let costs = Costs::new(units);
    let mut out = Vec::new();
    for group in runs(units, 0..units.len(), |u| u.group) {
        let packer = Packer {
            units,
            costs: &costs,
            max: params.max_tokens,
            overlap: params.overlap,
            short: params.merge_short.then_some(params.max_tokens / 8),
            alone: &all.alone,
            plans: Vec::new(),
            cur: Plan {
                overlap: group.start,
                start: group.start,
                end: group.start,
            },
        };
        let plans = packer.run(runs(units, group, |u| u.block));
        materialize(units, plans, params.max_tokens, &mut out);
    }
    out
}

/// Maximal runs of consecutive units in `range` sharing `key`.
fn runs(units: &[Unit<'_>], range: Range<usize>, key: fn(&Unit<'_>) -> usize) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for i in range {
        match out.last_mut() {
            Some(run) if key(&units[run.start]) == key(&units[i]) => run.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Planned size of any run of units in O(1).
struct Costs {
    /// `prefix[i]`: tokens of units `..i`, each with its separator.
    prefix: Vec<usize>,
    seps: Vec<usize>,
}

impl Costs {
    fn new(units: &[Unit<'_>]) -> Self {
        let mut cache: HashMap<&str, usize> = HashMap::new();
        let seps: Vec<usize> = units
            .iter()
            .map(|u| {
                // cl100k pre-tokenises " word" and " ." as one piece, so a single space before
                // anything but a digit costs nothing; counting it would underfill every chunk.
                if u.sep == " " && !u.text.starts_with(|c: char| c.is_ascii_digit()) {
                    0
                } else {
                    *cache.entry(u.sep).or_insert_with(|| count_tokens(u.sep))
                }
            })
            .collect();
        let mut prefix = Vec::with_capacity(units.len() + 1);
        prefix.push(0);
        for (unit, sep) in units.iter().zip(&seps) {
            prefix.push(prefix[prefix.len() - 1] + sep + unit.tokens);
        }
        Self { prefix, seps }
    }

    /// Tokens of units `a..b` joined; the first unit's separator is not part of it.
    fn of(&self, a: usize, b: usize) -> usize {
        if a >= b {
            return 0;
        }
        self.prefix[b] - self.prefix[a] - self.seps[a]
    }
}

/// A chunk as unit indices: `overlap..start` repeats the previous chunk, `start..end` is new.
#[derive(Debug, Clone, Copy)]
struct Plan {
    overlap: usize,
    start: usize,
    end: usize,
}

/// Plans the chunks of one group.
struct Packer<'p, 'a> {
    units: &'p [Unit<'a>],
    costs: &'p Costs,
    max: usize,
    overlap: usize,
    /// Chunks under this many tokens are merged into a neighbour; `None` without `merge_short`.
    short: Option<usize>,
    /// Blocks that open a chunk of their own (`Units::start_block_alone`).
    alone: &'p [usize],
    plans: Vec<Plan>,
    cur: Plan,
}

impl Packer<'_, '_> {
    fn run(mut self, blocks: Vec<Range<usize>>) -> Vec<Plan> {
        for block in blocks {
            self.add_block(block);
        }
        if self.cur.end > self.cur.start {
            self.plans.push(self.cur);
        }
        self.fold_short_tail();
        self.plans
    }

    fn add_block(&mut self, block: Range<usize>) {
        // Pushed in block order, so sorted.
        let alone = self.alone.binary_search(&self.units[block.start].block).is_ok();
        if alone && self.cur.end > self.cur.start {
            self.next_chunk(block.start, block.end);
        }
        if self.costs.of(block.start, block.end) > self.max {
            return self.stream(block);
        }
        if self.absorb(block.end) {
            return;
        }
        // A chunk holding only a heading, or too short to stand alone, takes the block's first
        // units rather than being closed.
        if !self.has_content() || self.is_short() {
            return self.stream(block);
        }
        self.next_chunk(block.start, block.end);
        self.cur.end = block.end;
    }

    /// Adds units one at a time, opening a new chunk whenever the next one does not fit.
    fn stream(&mut self, block: Range<usize>) {
        for i in block {
            if !self.absorb(i + 1) {
                self.next_chunk(i, i + 1);
                self.cur.end = i + 1;
            }
        }
    }

    /// Extends the current chunk to `end` if that fits, giving up its overlap when it is short.
    fn absorb(&mut self, end: usize) -> bool {
        if self.costs.of(self.cur.overlap, end) <= self.max {
            self.cur.end = end;
            return true;
        }
        if self.cur.overlap < self.cur.start && self.is_short() && self.costs.of(self.cur.start, end) <= self.max {
            self.cur = Plan {
                overlap: self.cur.start,
                end,
                ..self.cur
            };
            return true;
        }
        false
    }

    fn has_content(&self) -> bool {
        self.units[self.cur.start..self.cur.end]
            .iter()
            .any(|u| u.kind != UnitKind::Heading)
    }

    fn is_short(&self) -> bool {
        self.short
            .is_some_and(|short| self.costs.of(self.cur.overlap, self.cur.end) < short)
    }

    /// Closes the current chunk and opens one whose new units start at `next` and will reach
    /// at least `need_end`.
    fn next_chunk(&mut self, next: usize, need_end: usize) {
        let floor = self.cur.start;
        self.plans.push(self.cur);
        self.cur = Plan {
            overlap: self.overlap_start(floor, next, need_end),
            start: next,
            end: next,
        };
    }

    /// Where the overlap before `next` starts: the trailing prose units of `floor..next` worth at
    /// most `overlap` tokens, fewer if the chunk could not then hold `next..need_end`.
    fn overlap_start(&self, floor: usize, next: usize, need_end: usize) -> usize {
        if self.overlap == 0 || self.units[next].kind != UnitKind::Prose {
            return next;
        }
        let mut start = next;
        while start > floor
            && self.units[start - 1].kind == UnitKind::Prose
            && self.costs.of(start - 1, next) <= self.overlap
        {
            start -= 1;
        }
        while start < next && self.costs.of(start, need_end) > self.max {
            start += 1;
        }
        start
    }

    /// A short last chunk joins the previous one if both fit together; otherwise it takes
    /// trailing prose from the previous chunk until it is no longer short.
    fn fold_short_tail(&mut self) {
        let Some(short) = self.short else { return };
        let [.., prev, last] = self.plans[..] else { return };
        if self.costs.of(last.overlap, last.end) >= short {
            return;
        }
        let n = self.plans.len();
        if self.costs.of(prev.overlap, last.end) <= self.max {
            self.plans[n - 2].end = last.end;
            self.plans.pop();
            return;
        }
        let mut start = last.start;
        while start > prev.start + 1
            && self.units[start - 1].kind == UnitKind::Prose
            && self.costs.of(start, last.end) < short
            && self.costs.of(start - 1, last.end) <= self.max
        {
            start -= 1;
        }
        if start < last.start {
            self.plans[n - 2].end = start;
            self.plans[n - 1] = Plan {
                overlap: self.overlap_start(prev.start, start, last.end),
                start,
                end: last.end,
            };
        }
    }
}

/// Renders planned chunks and checks each one's real token count. Planned sizes are estimates
/// (BPE merges across unit boundaries); a chunk that turns out too long gives up an overlap unit,
/// else hands its last unit to the next chunk, until it fits.
fn materialize(units: &[Unit<'_>], mut plans: Vec<Plan>, max: usize, out: &mut Vec<Packed>) {
    let mut k = 0;
    while k < plans.len() {
        let plan = plans[k];
        let members = &units[plan.overlap..plan.end];
        let content = render(members);
        let tokens = count_tokens(&content);
        let section = members.first().map_or(0, |u| u.section);
        let title_section = members
            .iter()
            .find(|u| u.kind != UnitKind::Heading)
            .map_or(section, |u| u.section);
        if tokens <= max {
            if !content.is_empty() {
                out.push(Packed {
                    content,
                    tokens,
                    section,
                    title_section,
                });
            }
            k += 1;
        } else if plan.overlap < plan.start {
            plans[k].overlap += 1;
        } else if plan.end - plan.start > 1 {
            let shed = plan.end - 1;
            plans[k].end = shed;
            match plans.get_mut(k + 1) {
                Some(next) => {
                    *next = Plan {
                        overlap: next.overlap.min(shed),
                        start: shed,
                        end: next.end,
                    }
                }
                None => plans.push(Plan {
                    overlap: shed,
                    start: shed,
                    end: plan.end,
                }),
            }
        } else {
            for piece in split::sentences(&content, max) {
                let content = piece.text.to_owned();
                out.push(Packed {
                    content,
                    tokens: piece.tokens,
                    section,
                    title_section,
                });
            }
            k += 1;
        }
    }
}

fn render(units: &[Unit<'_>]) -> String {
    let mut text = String::with_capacity(units.iter().map(|u| u.sep.len() + u.text.len()).sum());
    for (k, unit) in units.iter().enumerate() {
        if k > 0 {
            text.push_str(unit.sep);
        }
        text.push_str(unit.text);
    }
    match text.trim() {
        trimmed if trimmed.len() == text.len() => text,
        trimmed => trimmed.to_owned(),
    }
}
