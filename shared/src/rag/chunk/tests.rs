//! Behaviour of the public chunking API, checked with real token counts.

use std::ops::Range;

use super::*;
use crate::rag::document::{ParsedDocument, Section, SectionKind};

fn section(kind: SectionKind, text: &str, title: Option<&str>, page: Option<u32>) -> Section {
    Section {
        kind,
        text: text.to_owned(),
        title: title.map(str::to_owned),
        page,
    }
}

fn para(text: &str, title: Option<&str>) -> Section {
    section(SectionKind::Paragraph, text, title, None)
}

fn heading(text: &str, title: &str) -> Section {
    section(SectionKind::Heading, text, Some(title), None)
}

fn doc(sections: Vec<Section>) -> ParsedDocument {
    ParsedDocument {
        sections,
        ..Default::default()
    }
}

fn params(mode: ChunkMode, max_tokens: usize, overlap: usize, merge_short: bool) -> ChunkParams {
    ChunkParams {
        mode,
        max_tokens,
        overlap,
        merge_short,
    }
}

fn run(doc: &ParsedDocument, params: &ChunkParams) -> Vec<Chunk> {
    match chunk(doc, params) {
        Ok(chunks) => chunks,
        Err(err) => panic!("chunking failed: {err}"),
    }
}

/// Numbered sentences, so tests can tell which ones a chunk holds.
fn numbered(from: usize, to: usize) -> String {
    (from..to)
        .map(|n| format!("Sentence number {n} talks about indexing."))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every chunk is non-empty, trimmed, counted correctly and within the limit.
fn assert_well_formed(chunks: &[Chunk], max: usize) {
    for c in chunks {
        assert!(!c.content.trim().is_empty(), "empty chunk");
        assert_eq!(c.content, c.content.trim(), "untrimmed chunk");
        let real = count_tokens(&c.content);
        assert_eq!(c.token_count, real, "token_count of {:?}", c.content);
        assert!(real <= max, "{real} tokens > {max} in {:?}", c.content);
    }
}

fn visible(text: &str) -> Vec<char> {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Ignoring whitespace, each chunk continues `source` where the previous one stopped, possibly
/// after repeating some of what came before (the overlap), and together they reach the end:
/// nothing is lost, reordered or invented. A chunk may open with a table's header lines
/// (`table_header`) ahead of that. Returns where each chunk sits in the whitespace-free
/// source, header left out.
fn assert_covers(source: &str, chunks: &[Chunk]) -> Vec<Range<usize>> {
    let whole = source;
    let source = visible(source);
    let mut pos = 0;
    let mut ranges = Vec::new();
    for c in chunks {
        let continues = |text: &[char]| (0..=pos.min(text.len())).find(|&k| source[pos - k..].starts_with(text));
        let mut text = visible(&c.content);
        let mut repeated = continues(&text);
        if repeated.is_none() {
            if let Some(header) = table_header(whole, &c.content) {
                text = visible(&c.content[header.len()..]);
                repeated = continues(&text);
            }
        }
        let Some(repeated) = repeated else {
            panic!("chunk does not continue the source at {pos}: {:?}", c.content);
        };
        ranges.push(pos - repeated..pos - repeated + text.len());
        pos += text.len() - repeated;
    }
    assert_eq!(pos, source.len(), "text lost at the end");
    ranges
}

/// The first one or two lines of `chunk` when they are the opening lines of a table of
/// `source` (a line of `|` cells after a blank line), as chunks of a long table repeat them.
fn table_header<'c>(source: &str, chunk: &'c str) -> Option<&'c str> {
    let mut ends = chunk.match_indices('\n').map(|(at, _)| at);
    let (one, two) = (ends.next(), ends.next());
    // The longer first: a Markdown header is its row and the delimiter row under it.
    [two, one]
        .into_iter()
        .flatten()
        .find(|&end| {
            let header = &chunk[..end];
            header.lines().all(|l| l.contains('|'))
                && (source.starts_with(header) || source.contains(&format!("\n\n{header}\n")))
        })
        .map(|end| &chunk[..end])
}

/// Characters each chunk repeats from the one before.
fn repeats(ranges: &[Range<usize>]) -> Vec<usize> {
    ranges
        .windows(2)
        .map(|pair| pair[0].end.saturating_sub(pair[1].start))
        .collect()
}

/// Deterministic pseudo-random numbers for generated documents.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound
    }
}

const WORDS: &[&str] = &[
    "index",
    "vector",
    "query",
    "document",
    "parser",
    "embedding",
    "the",
    "a",
    "of",
    "retrieval",
    "chunk",
    "model",
    "latency",
    "throughput",
    "storage",
    "tenant",
    "cluster",
    "schema",
    "2024",
    "3.14",
    "e.g.",
    "API",
    "JSON",
];
const CJK: &[&str] = &[
    "知识", "库", "文档", "切分", "检索", "向量", "模型", "的", "是", "在", "数据", "表格",
];

fn sentence(rng: &mut Lcg) -> String {
    let len = 3 + rng.next(25);
    if rng.next(4) == 0 {
        let body: String = (0..len).map(|_| CJK[rng.next(CJK.len())]).collect();
        return body + ["。", "！", "？"][rng.next(3)];
    }
    let body = (0..len)
        .map(|_| WORDS[rng.next(WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ");
    body + [".", "!", "?", ""][rng.next(4)]
}

fn paragraph(rng: &mut Lcg) -> String {
    match rng.next(12) {
        // A run-on sentence, far over any small limit, to force word splits.
        0 => (0..300)
            .map(|_| WORDS[rng.next(WORDS.len())])
            .collect::<Vec<_>>()
            .join(" "),
        // Unpunctuated CJK, to force character splits.
        1 => (0..400).map(|_| CJK[rng.next(CJK.len())]).collect(),
        _ => {
            let sentences: Vec<String> = (0..1 + rng.next(8)).map(|_| sentence(rng)).collect();
            sentences.join(if rng.next(3) == 0 { "\n" } else { " " })
        }
    }
}

fn table(rng: &mut Lcg, rows: usize) -> String {
    (0..rows)
        .map(|r| {
            format!(
                "| {r} | {} | {} |",
                WORDS[rng.next(WORDS.len())],
                CJK[rng.next(CJK.len())]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn generated(seed: u64, sections: usize) -> ParsedDocument {
    let mut rng = Lcg(seed);
    let mut out = Vec::new();
    let mut title: Option<String> = None;
    for i in 0..sections {
        let page = Some(1 + (i / 10) as u32);
        match rng.next(10) {
            0 => {
                let text = format!("Heading {i}");
                title = Some(format!("Part {} > {text}", i % 3));
                out.push(section(SectionKind::Heading, &text, title.as_deref(), page));
            }
            1 => {
                let rows = 1 + rng.next(60);
                out.push(section(
                    SectionKind::Table,
                    &table(&mut rng, rows),
                    title.as_deref(),
                    page,
                ));
            }
            2 => {
                let code = (0..1 + rng.next(30))
                    .map(|l| format!("    let x{l} = {l};"))
                    .collect::<Vec<_>>();
                out.push(section(SectionKind::Code, &code.join("\n"), title.as_deref(), page));
            }
            _ => {
                let text = (0..1 + rng.next(3))
                    .map(|_| paragraph(&mut rng))
                    .collect::<Vec<_>>()
                    .join("\n\n");
                out.push(section(SectionKind::Paragraph, &text, title.as_deref(), page));
            }
        }
    }
    doc(out)
}

#[test]
fn counts_tokens_with_cl100k() {
    assert_eq!(count_tokens("hello world"), 2);
    assert_eq!(count_tokens(""), 0);
}

#[test]
fn small_document_is_one_chunk() {
    let d = doc(vec![para("Hello there. This is short.", None)]);
    let chunks = run(&d, &ChunkParams::default());
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].content, "Hello there. This is short.");
    assert_eq!(chunks[0].paragraph_index, 0);
    assert_eq!(chunks[0].title, None);
}

#[test]
fn empty_and_blank_documents_give_no_chunks() {
    assert!(run(&doc(vec![]), &ChunkParams::default()).is_empty());
    assert!(run(&doc(vec![para(" \n\t ", None)]), &ChunkParams::default()).is_empty());
    assert!(matches!(chunk_text("   ", &ChunkParams::default()), Ok(chunks) if chunks.is_empty()));
}

#[test]
fn headings_start_chunks_and_lead_them() {
    let d = doc(vec![
        para("Intro text before any heading.", None),
        heading("Install", "Install"),
        para("Run the installer.", Some("Install")),
        heading("Linux", "Install > Linux"),
        para("Use the package manager.", Some("Install > Linux")),
        para("Then reboot.", Some("Install > Linux")),
    ]);
    let chunks = run(&d, &ChunkParams::default());
    let got: Vec<(&str, Option<&str>, usize)> = chunks
        .iter()
        .map(|c| (c.content.as_str(), c.title.as_deref(), c.paragraph_index))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Intro text before any heading.", None, 0),
            ("Install\n\nRun the installer.", Some("Install"), 1),
            (
                "Linux\n\nUse the package manager.\n\nThen reboot.",
                Some("Install > Linux"),
                3
            ),
        ]
    );
}

#[test]
fn consecutive_headings_share_the_chunk_of_the_content_below() {
    let d = doc(vec![
        heading("Install", "Install"),
        heading("Linux", "Install > Linux"),
        para("Use the package manager.", Some("Install > Linux")),
    ]);
    let chunks = run(&d, &ChunkParams::default());
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].content, "Install\n\nLinux\n\nUse the package manager.");
    assert_eq!(chunks[0].title.as_deref(), Some("Install > Linux"));
    assert_eq!(chunks[0].paragraph_index, 0);
}

#[test]
fn chunks_never_mix_titles_even_without_headings() {
    let d = doc(vec![
        section(SectionKind::Table, "a,b\n1,2", Some("Sheet1"), None),
        section(SectionKind::Table, "c,d\n3,4", Some("Sheet2"), None),
    ]);
    let chunks = run(&d, &ChunkParams::default());
    let got: Vec<(&str, Option<&str>)> = chunks
        .iter()
        .map(|c| (c.content.as_str(), c.title.as_deref()))
        .collect();
    assert_eq!(got, vec![("a,b\n1,2", Some("Sheet1")), ("c,d\n3,4", Some("Sheet2"))]);
}

#[test]
fn long_heading_group_keeps_one_title_and_heading_only_first() {
    let d = doc(vec![heading("Guide", "Guide"), para(&numbered(0, 200), Some("Guide"))]);
    let p = params(ChunkMode::Default, 128, 16, true);
    let chunks = run(&d, &p);
    assert!(chunks.len() > 3);
    assert_well_formed(&chunks, 128);
    assert!(chunks.iter().all(|c| c.title.as_deref() == Some("Guide")));
    assert!(chunks[0].content.starts_with("Guide\n\nSentence number 0 "));
    assert!(chunks[1..].iter().all(|c| c.content.starts_with("Sentence number")));
    assert_covers(&d.full_text(), &chunks);
}

#[test]
fn large_table_is_split_by_whole_rows_with_its_header_on_every_chunk() {
    let header = "| Row | Value | Note |\n|-----|:-----:|------|";
    let rows: Vec<String> = (0..300)
        .map(|r| format!("| row {r} | value {} | note |", r * 7))
        .collect();
    let d = doc(vec![
        para("The table below lists values.", Some("Data")),
        section(
            SectionKind::Table,
            &format!("{header}\n{}", rows.join("\n")),
            Some("Data"),
            Some(4),
        ),
    ]);
    let p = params(ChunkMode::Default, 200, 40, false);
    let chunks = run(&d, &p);
    assert_well_formed(&chunks, 200);
    let mut seen = Vec::new();
    for (k, c) in chunks.iter().filter(|c| c.content.contains("| row")).enumerate() {
        // The first one follows the paragraph above the table; the others open with the header.
        let headed = match k {
            0 => c.content.contains(header),
            _ => c.content.starts_with(header),
        };
        assert!(headed, "a chunk of rows without its header: {:?}", c.content);
        for line in c.content.lines().filter(|l| l.starts_with("| row")) {
            assert!(rows.contains(&line.to_owned()), "cut row {line:?}");
            seen.push(line.to_owned());
        }
    }
    assert!(chunks.len() > 10);
    assert_eq!(seen, rows, "every row exactly once, in order");
    assert_eq!(
        repeats(&assert_covers(&d.full_text(), &chunks)).iter().sum::<usize>(),
        0,
        "nothing repeated but the header"
    );
    assert_eq!(chunks[1].page, Some(4));
}

/// The usual layout, a heading and then the table, with short chunks merged (the default).
#[test]
fn a_long_table_under_a_heading_keeps_its_header_on_every_chunk() {
    let header = "| Product | Price |\n|---|---|";
    let rows: Vec<String> = (0..200).map(|r| format!("| item {r} | {}.50 |", r * 3)).collect();
    let d = doc(vec![
        heading("Prices", "Prices"),
        section(
            SectionKind::Table,
            &format!("{header}\n{}", rows.join("\n")),
            Some("Prices"),
            None,
        ),
    ]);
    let chunks = run(&d, &params(ChunkMode::Default, 120, 20, true));
    assert_well_formed(&chunks, 120);
    assert!(
        chunks[0].content.starts_with("Prices\n\n| Product | Price |"),
        "{:?}",
        chunks[0].content
    );
    for c in chunks.iter().skip(1) {
        assert!(
            c.content.starts_with(header),
            "a chunk of rows without its header: {:?}",
            c.content
        );
    }
    let seen: usize = chunks
        .iter()
        .map(|c| c.content.lines().filter(|l| l.starts_with("| item")).count())
        .sum();
    assert_eq!(seen, 200);
    assert_covers(&d.full_text(), &chunks);
}

#[test]
fn a_table_that_fits_or_has_no_header_row_is_not_given_one() {
    // Rows of a sheet name their columns themselves.
    let sheet: Vec<String> = (0..300).map(|r| format!("Row: {r}; Value: {}", r * 7)).collect();
    let d = doc(vec![section(
        SectionKind::Table,
        &sheet.join("\n"),
        Some("Sheet1"),
        None,
    )]);
    let chunks = run(&d, &params(ChunkMode::Default, 100, 0, false));
    let lines: usize = chunks.iter().map(|c| c.content.lines().count()).sum();
    assert_eq!(lines, 300);
    // A table that fits is one chunk as it is.
    let small = "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |";
    let d = doc(vec![section(SectionKind::Table, small, None, None)]);
    let chunks = run(&d, &params(ChunkMode::Default, 100, 0, false));
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].content, small);
}

#[test]
fn table_that_fits_is_kept_whole_in_a_new_chunk() {
    let rows: Vec<String> = (0..20).map(|r| format!("| {r} | item {r} |")).collect();
    let table = rows.join("\n");
    let table_tokens = count_tokens(&table);
    let text = numbered(0, 12);
    assert!(count_tokens(&text) + table_tokens > 200 && table_tokens < 200);
    let d = doc(vec![para(&text, None), section(SectionKind::Table, &table, None, None)]);
    let chunks = run(&d, &params(ChunkMode::Default, 200, 20, true));
    assert_well_formed(&chunks, 200);
    assert_eq!(chunks.last().map(|c| c.content.as_str()), Some(table.as_str()));
    assert_eq!(chunks.last().map(|c| c.paragraph_index), Some(1));
}

#[test]
fn code_block_that_fits_is_kept_whole() {
    let code = (0..15)
        .map(|l| format!("    let value_{l} = compute({l});"))
        .collect::<Vec<_>>()
        .join("\n");
    let d = doc(vec![
        para(&numbered(0, 10), None),
        section(SectionKind::Code, &code, None, None),
    ]);
    let chunks = run(&d, &params(ChunkMode::Default, 200, 0, true));
    assert_well_formed(&chunks, 200);
    assert!(chunks.iter().any(|c| c.content == code.trim()), "{chunks:#?}");
}

#[test]
fn long_paragraph_is_split_at_sentence_ends() {
    let d = doc(vec![para(&numbered(0, 100), None)]);
    let chunks = run(&d, &params(ChunkMode::Default, 100, 0, false));
    assert!(chunks.len() > 5);
    assert_well_formed(&chunks, 100);
    for c in &chunks {
        assert!(
            c.content.starts_with("Sentence number") && c.content.ends_with("indexing."),
            "{:?}",
            c.content
        );
    }
    assert!(repeats(&assert_covers(&d.full_text(), &chunks)).iter().all(|&r| r == 0));
}

#[test]
fn unpunctuated_text_is_split_by_words() {
    let text = (0..2000).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let chunks = match chunk_text(&text, &params(ChunkMode::Default, 64, 8, true)) {
        Ok(chunks) => chunks,
        Err(err) => panic!("{err}"),
    };
    assert_well_formed(&chunks, 64);
    assert_covers(&text, &chunks);
    let words: Vec<&str> = text.split(' ').collect();
    for c in &chunks {
        let first = c.content.split(' ').next().unwrap_or_default();
        assert!(words.contains(&first), "chunk starts mid-word: {first:?}");
    }
}

#[test]
fn cjk_is_split_by_sentences_then_characters() {
    let mut rng = Lcg(3);
    let punctuated: String = (0..40)
        .map(|_| {
            let body: String = (0..4 + rng.next(12)).map(|_| CJK[rng.next(CJK.len())]).collect();
            body + ["。", "！", "？"][rng.next(3)]
        })
        .collect();
    let spaceless: String = (0..600).map(|_| CJK[rng.next(CJK.len())]).collect();
    let d = doc(vec![para(&punctuated, Some("中文")), para(&spaceless, Some("中文"))]);
    for overlap in [0, 12] {
        let chunks = run(&d, &params(ChunkMode::Default, 64, overlap, true));
        assert_well_formed(&chunks, 64);
        let ranges = assert_covers(&d.full_text(), &chunks);
        assert_eq!(repeats(&ranges).iter().any(|&r| r > 0), overlap > 0);
        // Chunks within the punctuated paragraph end at sentence ends.
        let punctuated_len = visible(&punctuated).len();
        for (c, range) in chunks.iter().zip(&ranges).filter(|(_, r)| r.end < punctuated_len) {
            assert!(c.content.ends_with(['。', '！', '？']), "{c:?} at {range:?}");
        }
    }
}

#[test]
fn overlap_repeats_whole_trailing_sentences_within_budget() {
    let d = doc(vec![para(&numbered(0, 60), Some("T"))]);
    let chunks = run(&d, &params(ChunkMode::Default, 100, 30, false));
    assert_well_formed(&chunks, 100);
    assert_covers(&d.full_text(), &chunks);
    for pair in chunks.windows(2) {
        let next_start = pair[1].content.split('.').next().unwrap_or_default();
        assert!(pair[0].content.contains(next_start), "no overlap between {pair:#?}");
        let repeated: String = pair[1]
            .content
            .split_inclusive("indexing.")
            .take_while(|s| pair[0].content.contains(s.trim()))
            .collect();
        assert!(!repeated.is_empty());
        assert!(count_tokens(repeated.trim()) <= 30, "overlap too long: {repeated:?}");
    }
}

#[test]
fn overlap_does_not_cross_titles_or_enter_tables() {
    let rows: Vec<String> = (0..80).map(|r| format!("| {r} | cell |")).collect();
    let d = doc(vec![
        para(&numbered(0, 30), Some("A")),
        para(&numbered(30, 60), Some("B")),
        section(SectionKind::Table, &rows.join("\n"), Some("B"), None),
    ]);
    let chunks = run(&d, &params(ChunkMode::Default, 120, 40, false));
    assert_well_formed(&chunks, 120);
    let first_b = chunks
        .iter()
        .position(|c| c.title.as_deref() == Some("B"))
        .unwrap_or(usize::MAX);
    assert!(chunks[first_b].content.starts_with("Sentence number 30 "));
    for c in chunks.iter().filter(|c| c.content.starts_with('|')) {
        assert!(
            !c.content.contains("Sentence"),
            "prose repeated into a table chunk: {c:?}"
        );
    }
    assert_covers(&d.full_text(), &chunks);
}

#[test]
fn merge_short_folds_a_small_tail_into_its_neighbour() {
    let text = format!("{} Tail.", numbered(0, 9));
    let d = doc(vec![para(&text, None)]);
    let tokens = count_tokens(&numbered(0, 9));
    let max = tokens + 1;
    assert!(count_tokens(&text) > max, "the tail must not fit");

    let apart = run(&d, &params(ChunkMode::Default, max, 0, false));
    assert_eq!(apart.last().map(|c| c.content.as_str()), Some("Tail."));

    let merged = run(&d, &params(ChunkMode::Default, max, 0, true));
    assert_well_formed(&merged, max);
    assert!(merged.iter().all(|c| c.token_count >= max / 8), "{merged:#?}");
    assert_covers(&text, &merged);
}

#[test]
fn merge_short_keeps_a_short_paragraph_with_the_next_block() {
    let (first, big) = (numbered(100, 109), numbered(0, 9));
    let max = count_tokens(&first).max(count_tokens(&big)) + 2;
    let d = doc(vec![para(&first, None), para("Short one.", None), para(&big, None)]);
    let apart = run(&d, &params(ChunkMode::Default, max, 0, false));
    assert!(apart.iter().any(|c| c.content == "Short one."));
    let merged = run(&d, &params(ChunkMode::Default, max, 0, true));
    assert_well_formed(&merged, max);
    assert!(merged.iter().all(|c| c.content != "Short one."), "{merged:#?}");
    assert_covers(&d.full_text(), &merged);
}

#[test]
fn merge_short_never_crosses_titles() {
    let d = doc(vec![para("Tiny.", Some("A")), para("Also tiny.", Some("B"))]);
    let chunks = run(&d, &ChunkParams::default());
    assert_eq!(chunks.len(), 2);
}

#[test]
fn delimiter_mode_splits_on_escaped_newline_and_packs() {
    let d = doc(vec![para("alpha\nbeta\ngamma", None), para("delta", None)]);
    let chunks = run(&d, &params(ChunkMode::Delimiter("\\n".into()), 16, 0, false));
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].content, "alpha\nbeta\ngamma\ndelta");

    let faq = "Q1 what? A1 this.###Q2 why? A2 that.###Q3 how? A3 so.";
    let d = doc(vec![para(faq, None)]);
    let pieces: Vec<String> = faq.split("###").map(str::to_owned).collect();
    let max = pieces.iter().map(|p| count_tokens(p)).max().unwrap_or(0) + 1;
    let max = max.max(16);
    let chunks = run(&d, &params(ChunkMode::Delimiter("###".into()), max, 0, false));
    assert_well_formed(&chunks, max);
    assert!(chunks.iter().all(|c| !c.content.contains("###")));
    assert_covers(&faq.replace("###", " "), &chunks);
}

#[test]
fn delimiter_pieces_over_the_limit_are_split_like_default() {
    let text = format!("{}@@{}", numbered(0, 40), numbered(40, 45));
    let d = doc(vec![para(&text, None)]);
    let chunks = run(&d, &params(ChunkMode::Delimiter("@@".into()), 64, 0, false));
    assert_well_formed(&chunks, 64);
    assert!(chunks.iter().all(|c| c.content.ends_with("indexing.")));
    assert_covers(&text.replace("@@", " "), &chunks);
}

#[test]
fn regex_mode_starts_a_piece_at_each_match() {
    let text = format!(
        "Article 1. {}\nArticle 2. Short.\nArticle 3. {}",
        numbered(0, 3),
        numbered(3, 6)
    );
    let d = doc(vec![para(&text, None)]);
    let max = count_tokens(&format!("Article 1. {}", numbered(0, 3))) + 4;
    let chunks = run(&d, &params(ChunkMode::Regex(r"Article \d+\.".into()), max, 0, false));
    assert_well_formed(&chunks, max);
    assert!(chunks.iter().all(|c| c.content.starts_with("Article ")), "{chunks:#?}");
    assert_covers(&text, &chunks);
}

#[test]
fn delimiter_and_regex_chunks_name_the_section_they_start_in() {
    let d = doc(vec![
        section(SectionKind::Paragraph, "one two", Some("First"), Some(1)),
        section(SectionKind::Paragraph, "SPLIT three four", Some("Second"), Some(2)),
    ]);
    let chunks = run(&d, &params(ChunkMode::Regex("SPLIT".into()), 16, 0, false));
    let got: Vec<(Option<&str>, Option<u32>, usize)> = chunks
        .iter()
        .map(|c| (c.title.as_deref(), c.page, c.paragraph_index))
        .collect();
    assert_eq!(got, vec![(Some("First"), Some(1), 0)]);
    let chunks = run(&d, &params(ChunkMode::Delimiter("two".into()), 16, 0, false));
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].content, "one\nSPLIT three four");
}

#[test]
fn pages_come_from_the_section_a_chunk_starts_in() {
    let d = doc(vec![
        section(SectionKind::Paragraph, &numbered(0, 20), None, Some(1)),
        section(SectionKind::Paragraph, &numbered(20, 40), None, Some(2)),
    ]);
    let chunks = run(&d, &params(ChunkMode::Default, 150, 0, false));
    assert_well_formed(&chunks, 150);
    for c in &chunks {
        let first: usize = c.content["Sentence number ".len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(999);
        assert_eq!(c.page, Some(if first < 20 { 1 } else { 2 }), "{c:?}");
        assert_eq!(c.paragraph_index, if first < 20 { 0 } else { 1 });
    }
}

#[test]
fn chunk_text_uses_default_rules_whatever_the_mode() {
    let p = params(ChunkMode::Regex("(".into()), 64, 8, true);
    let text = numbered(0, 30);
    let chunks = match chunk_text(&text, &p) {
        Ok(chunks) => chunks,
        Err(err) => panic!("{err}"),
    };
    assert!(chunks.len() > 1);
    assert_well_formed(&chunks, 64);
    assert_covers(&text, &chunks);
    assert!(chunks
        .iter()
        .all(|c| c.title.is_none() && c.page.is_none() && c.paragraph_index == 0));
}

#[test]
fn invalid_params_are_rejected_naming_the_field() {
    let d = doc(vec![para("text", None)]);
    let error = |p: ChunkParams| chunk(&d, &p).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error(params(ChunkMode::Default, 8, 0, true)).contains("maxChunkTokens"));
    assert!(error(params(ChunkMode::Default, 100, 50, true)).contains("chunkOverlap"));
    assert!(error(params(ChunkMode::Delimiter(String::new()), 100, 0, true)).contains("customDelimiter"));
    assert!(error(params(ChunkMode::Regex("[a-".into()), 100, 0, true)).contains("chunkRegex"));
    assert!(chunk_text("text", &params(ChunkMode::Default, 9000, 0, true)).is_err());
}

#[test]
fn generated_documents_keep_the_invariants_in_every_mode() {
    for seed in 1..=4 {
        let d = generated(seed, 50);
        let source = d.full_text();
        for (max, overlap, merge_short) in [(16, 0, false), (64, 16, true), (200, 0, true), (512, 64, true)] {
            let p = params(ChunkMode::Default, max, overlap, merge_short);
            let chunks = run(&d, &p);
            assert_well_formed(&chunks, max);
            let ranges = assert_covers(&source, &chunks);
            if overlap == 0 {
                assert!(
                    repeats(&ranges).iter().all(|&r| r == 0),
                    "seed {seed}: repeated text without overlap"
                );
            }
            assert_titles_unmixed(&d, &chunks, &ranges);
            let regex = run(
                &d,
                &params(ChunkMode::Regex(r"(?m)^\| 0 \|".into()), max, overlap, merge_short),
            );
            assert_well_formed(&regex, max);
            assert_covers(&source, &regex);
            let delimited = run(
                &d,
                &params(ChunkMode::Delimiter("\\n\\n".into()), max, overlap, merge_short),
            );
            assert_well_formed(&delimited, max);
            assert_covers(&source, &delimited);
        }
    }
}

/// Every non-heading section a chunk touches has the chunk's title.
fn assert_titles_unmixed(doc: &ParsedDocument, chunks: &[Chunk], ranges: &[Range<usize>]) {
    let mut spans = Vec::new();
    let mut pos = 0;
    for s in &doc.sections {
        let len = visible(&s.text).len();
        spans.push(pos..pos + len);
        pos += len;
    }
    for (c, range) in chunks.iter().zip(ranges) {
        for (s, span) in doc.sections.iter().zip(&spans) {
            if span.start < range.end && range.start < span.end && s.kind != SectionKind::Heading {
                assert_eq!(s.title, c.title, "chunk {c:?} mixes titles");
            }
        }
    }
}

#[test]
fn two_megabytes_of_text_keep_the_invariants() {
    let mut rng = Lcg(7);
    let mut sections = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < 2_000_000 {
        let s = match i % 25 {
            0 => heading(&format!("Chapter {i}"), &format!("Chapter {i}")),
            7 => section(
                SectionKind::Table,
                &table(&mut rng, 400),
                Some(&format!("Chapter {}", i - i % 25)),
                None,
            ),
            _ => para(&paragraph(&mut rng), Some(&format!("Chapter {}", i - i % 25))),
        };
        size += s.text.len();
        sections.push(s);
        i += 1;
    }
    let d = doc(sections);
    let chunks = run(&d, &ChunkParams::default());
    assert_well_formed(&chunks, ChunkParams::default().max_tokens);
    let ranges = assert_covers(&d.full_text(), &chunks);
    assert_titles_unmixed(&d, &chunks, &ranges);
}
