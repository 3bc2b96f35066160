from archivist.ingest.splitter import SplitterSettings, is_cjk, split_text

SMALL = SplitterSettings(chunk_size=300, chunk_overlap=60, cjk_chunk_size=120, cjk_chunk_overlap=20)


def test_offsets_slice_the_text_back_to_each_chunk():
    text = "# Title\n\n" + "\n\n".join(f"Paragraph {i}. " + "word " * 40 for i in range(8))
    chunks = split_text(text, SMALL)
    assert len(chunks) > 3
    for chunk in chunks:
        assert text[chunk.start : chunk.end] == chunk.text
        assert len(chunk.text) <= SMALL.chunk_size
    # Together the chunks cover every paragraph.
    for i in range(8):
        assert any(f"Paragraph {i}." in c.text for c in chunks)


def test_fenced_code_blocks_and_tables_stay_whole():
    code = "```python\n" + "\n".join(f"x{i} = {i}  # line {i}" for i in range(22)) + "\n```"
    table = "| code | meaning |\n|---|---|\n" + "\n".join(
        f"| E{i} | error {i} |" for i in range(20)
    )
    assert 300 < len(code) < 600 and 300 < len(table) < 600
    text = f"# Codes\n\nIntro text.\n\n{code}\n\nBetween.\n\n{table}\n\nAfter."
    chunks = split_text(text, SMALL)
    assert sum(code in c.text for c in chunks) >= 1
    assert sum(table in c.text for c in chunks) >= 1
    assert not any("x3 = 3" in c.text and code not in c.text for c in chunks)


def test_code_block_over_the_hard_limit_is_cut_by_lines():
    code = "```\n" + "\n".join(f"line {i:04d} " + "x" * 30 for i in range(40)) + "\n```"
    chunks = split_text(code, SMALL)
    assert len(chunks) > 1
    assert all(len(c.text) <= SMALL.chunk_size for c in chunks)
    assert all(c.text.startswith(("```", "line")) for c in chunks)


def test_chinese_text_splits_at_chinese_sentence_ends():
    sentence = "退货需要在三十天内提出申请并附上订单号。"
    text = "# 退货\n\n" + sentence * 30
    assert is_cjk(text)
    chunks = split_text(text, SMALL)
    assert len(chunks) > 2
    for chunk in chunks[1:]:
        assert len(chunk.text) <= SMALL.cjk_chunk_size
        assert chunk.text.endswith("。")
        assert text[chunk.start : chunk.end] == chunk.text


def test_heading_path_is_recorded_per_chunk():
    text = (
        "# Shop\n\nIntro "
        + "a " * 100
        + "\n\n## Refunds\n\nRefunds take 30 days. "
        + "b " * 100
        + "\n\n### Damaged goods\n\nReport within 48 hours. "
        + "c " * 100
    )
    chunks = split_text(text, SMALL)
    by_text = {c.text.split("\n")[0]: c.headings for c in chunks}
    assert by_text["## Refunds"] == ["Shop", "Refunds"]
    assert by_text["### Damaged goods"] == ["Shop", "Refunds", "Damaged goods"]


def test_front_matter_free_empty_text_gives_no_chunks():
    assert split_text("   \n\n  ") == []


def test_long_latin_paragraphs_split_at_sentence_ends_including_semicolons():
    sentences = [
        "Refunds are paid within thirty days of delivery.",
        "Do you need a return label?",
        "Print it at home!",
        "Opened electronics cost a restocking fee; sealed ones do not.",
    ]
    text = " ".join(sentences * 6)  # one paragraph, no line breaks
    chunks = split_text(text, SMALL)
    assert len(chunks) > 3
    for chunk in chunks:
        assert text[chunk.start : chunk.end] == chunk.text
        assert chunk.text.endswith((".", "?", "!", ";"))
        assert len(chunk.text) <= SMALL.chunk_size


def test_cjk_text_splits_at_every_cjk_sentence_mark():
    text = (
        "配送需要十个工作日。关税由收件人承担吗？是的！请在邮件主题中写明中文客服；我们会尽快回复。"
        * 8
    )
    chunks = split_text(text, SMALL)
    assert len(chunks) > 2
    for chunk in chunks:
        assert text[chunk.start : chunk.end] == chunk.text
        assert chunk.text.endswith(("。", "？", "！", "；"))
        assert len(chunk.text) <= SMALL.cjk_chunk_size


def test_guarantees_hold_on_a_mixed_document_at_several_sizes():
    code = (
        "```sh\n" + "\n".join(f"curl https://api.example/v1/orders/{i}" for i in range(8)) + "\n```"
    )
    table = "| tier | points |\n|---|---|\n" + "\n".join(f"| T{i} | {i * 500} |" for i in range(8))
    text = "\n\n".join(
        [
            "# Handbook",
            "Intro. " * 30,
            "## API",
            code,
            "Between the blocks. " * 10,
            "## Tiers",
            table,
            "## 中文",
            "请在邮件主题中写明中文客服。" * 20,
        ]
    )
    for size in (120, 200, 320, 500, 1000):
        settings = SplitterSettings(
            chunk_size=size, chunk_overlap=size // 5, cjk_chunk_size=size, cjk_chunk_overlap=0
        )
        chunks = split_text(text, settings)
        for chunk in chunks:
            assert text[chunk.start : chunk.end] == chunk.text
            assert len(chunk.text) <= size * settings.atomic_limit
        for block in (code, table):
            whole = len(block) <= size * settings.atomic_limit
            assert any(block in c.text for c in chunks) == whole
        # Every non-space character of the text is in some chunk.
        covered = set()
        for chunk in chunks:
            covered.update(range(chunk.start, chunk.end))
        assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
