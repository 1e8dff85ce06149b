"""Tokenising task examples, optionally into the PAPA layout.

A constant attention matrix mixes positions, not tokens, so PAPA needs every example laid out the
same way: the first sentence in the first half of the T positions, the second sentence from T//2 on,
and the final separator always at T-1. Then a head replaced by a constant matrix attends, say, "to
the last separator" for every example, as the averaged attention it replaces did.

Decoders (GPT-2, the Llama family) have no [CLS]/[SEP] to move: `decoder_sequence_layout` places a
pair's second text at T//2 instead, and token rows stay as the tokenizer right-padded them.
"""

from ..errors import PapaError

IGNORE_INDEX = -100  # label of positions the loss and the metrics skip (HF convention)


def papa_sequence_layout(input_ids: list[int], token_type_ids: list[int] | None, sep_token_id: int,
                         pad_token_id: int, max_length: int, original_token_types: bool = False) -> dict:
    """Re-lay one tokenised example onto T = max_length positions, as the original PAPA code does.

    With f the first and e the last separator: tokens 0..min(f, T//2)-1 keep their positions; tokens
    f..e-1 (the separator(s) and the second sentence) move to T//2, T//2+1, ..., stopping before T-1;
    token e goes to T-1. Everything else is padding (mask 0). A single sentence (f = e) keeps at most
    T//2 tokens and its separator lands at T-1. Works for BERT ([CLS] a [SEP] b [SEP]) and RoBERTa
    (<s> a </s></s> b </s>).

    Unlike the original code, token_type_ids move with their tokens (it left them in place, so the
    second sentence of a BERT pair was read with token type 0); input_ids and mask are identical.
    `original_token_types` leaves them in place, as the original did (the row must be padded to T).
    """
    T = max_length
    if T < 1:
        raise PapaError(f"max_length must be at least 1 for the PAPA layout, got {T}")
    if sep_token_id not in input_ids:
        raise PapaError(f"no separator token (id {sep_token_id}) in input_ids; the PAPA layout needs the "
                        f"tokenizer to add special tokens")
    if token_type_ids is not None and len(token_type_ids) != len(input_ids):
        raise PapaError(f"token_type_ids has {len(token_type_ids)} entries but input_ids has {len(input_ids)}")
    if original_token_types and token_type_ids is not None and len(token_type_ids) != T:
        raise PapaError(f"original token types stay in place, so the row must be padded to max_length={T}; "
                        f"it has {len(token_type_ids)} positions")
    first_sep = input_ids.index(sep_token_id)
    last_sep = len(input_ids) - 1 - input_ids[::-1].index(sep_token_id)

    # (source position, target position) of every token that is kept
    moves = [(j, j) for j in range(min(first_sep, T // 2))]
    second_half = range(first_sep, last_sep)
    moves += [(j, T // 2 + j - first_sep) for j in second_half if T // 2 + j - first_sep < T - 1]
    moves.append((last_sep, T - 1))

    new_ids, mask, types = [pad_token_id] * T, [0] * T, [0] * T
    for source, target in moves:
        new_ids[target] = input_ids[source]
        mask[target] = 1
        if token_type_ids is not None:
            types[target] = token_type_ids[source]
    out = {"input_ids": new_ids, "attention_mask": mask}
    if token_type_ids is not None:
        out["token_type_ids"] = list(token_type_ids) if original_token_types else types
    return out


def check_right_padding(tokenizer):
    """Rows padded to T must start at position 0, where avgs.pt's positions start (papa.models.pretrained sets it)."""
    if getattr(tokenizer, "padding_side", "right") != "right":
        raise PapaError(f"the tokenizer pads on the {tokenizer.padding_side}; PAPA's positions must line up with "
                        f"avgs.pt, so set tokenizer.padding_side = 'right' (the scripts do)")


def tokenize_sequence_examples(tokenizer, examples: dict, sentence1_key, sentence2_key, max_length,
                               papa_layout: bool, pad_to_max_length: bool, original_token_types: bool = False,
                               causal: bool = False) -> dict:
    """Tokenise a batch of sentence (pair) examples, for `datasets.map(batched=True)`.

    The PAPA layout needs every row padded to max_length first; `causal` (a decoder) lays rows out with
    `decoder_sequence_layout`. "label" is copied to "labels", the name the model's forward takes.
    """
    texts = (examples[sentence1_key],) if sentence2_key is None else (examples[sentence1_key],
                                                                      examples[sentence2_key])
    padding = "max_length" if pad_to_max_length or papa_layout else False
    if padding:
        check_right_padding(tokenizer)
    if papa_layout and causal:
        result = tokenize_decoder_texts(tokenizer, texts, max_length)
    else:
        result = dict(tokenizer(*texts, padding=padding, max_length=max_length, truncation=True))
    if papa_layout and not causal:
        types = result.get("token_type_ids")
        rows = [papa_sequence_layout(ids, None if types is None else types[i], tokenizer.sep_token_id,
                                     tokenizer.pad_token_id, max_length, original_token_types)
                for i, ids in enumerate(result["input_ids"])]
        for key in rows[0] if rows else ():
            result[key] = [row[key] for row in rows]
    if "label" in examples:
        result["labels"] = list(examples["label"])
    return result


def decoder_sequence_layout(first_ids: list[int], second_ids: list[int] | None, pad_token_id: int,
                            max_length: int) -> dict:
    """The PAPA layout of a decoder's example on T = max_length positions, right padded.

    A single text starts at position 0 and keeps at most T tokens. A pair's first text keeps at most
    T//2 tokens from position 0, and its second text starts at T//2 and keeps at most T - T//2: as
    for the encoders, the second text begins at the same position in every example, so a constant
    matrix averaged over the training set reads it where it was seen. Decoders have no separator to
    anchor, so nothing is pinned to T-1; the sequence classifier of a decoder pools the last real
    token (the last one not equal to the pad id, the end of the second text), wherever it lies.
    The gap between the texts is padding (mask 0), which the model's own mask hides; position ids
    are 0..T-1, so the second text's positions are the same in every example.
    """
    T = max_length
    if T < 1:
        raise PapaError(f"max_length must be at least 1 for the PAPA layout, got {T}")
    if second_ids is not None and T < 2:
        raise PapaError(f"a pair of texts needs max_length of at least 2 for the PAPA layout (one position each), "
                        f"got {T}")
    first_ids = first_ids[:T if second_ids is None else T // 2]
    kept = [(0, first_ids)] if second_ids is None else [(0, first_ids), (T // 2, second_ids[:T - T // 2])]
    new_ids, mask = [pad_token_id] * T, [0] * T
    for start, ids in kept:
        new_ids[start:start + len(ids)] = ids
        mask[start:start + len(ids)] = [1] * len(ids)
    return {"input_ids": new_ids, "attention_mask": mask}


def tokenize_decoder_texts(tokenizer, texts, max_length) -> dict:
    """{"input_ids", "attention_mask"} of a batch of single texts or pairs (`texts`: one or two lists) in
    `decoder_sequence_layout`.

    Each text is tokenised on its own with the tokenizer's special tokens (Llama's <s> before each
    text, as its pair template does; GPT-2's none), and truncated by the tokenizer to what its part
    of the layout holds (T, or T//2 and T - T//2), so a trailing special token survives truncation.
    """
    T = max_length
    if len(texts) == 1:
        firsts, seconds = tokenizer(texts[0], max_length=T, truncation=True)["input_ids"], None
    else:
        firsts = tokenizer(texts[0], max_length=max(T // 2, 1), truncation=True)["input_ids"]
        seconds = tokenizer(texts[1], max_length=max(T - T // 2, 1), truncation=True)["input_ids"]
    rows = [decoder_sequence_layout(ids, None if seconds is None else seconds[i], tokenizer.pad_token_id, T)
            for i, ids in enumerate(firsts)]
    return {key: [row[key] for row in rows] for key in ("input_ids", "attention_mask")}


def papa_token_layout(input_ids, attention_mask, labels, sep_token_id, pad_token_id, max_length):
    """PAPA layout for a token task row already padded to T: the separator goes to T-1.

    The separator after the sentence becomes padding (mask 0, label -100) and position T-1 holds the
    separator (mask 1, label -100), so the last position is the separator for every example, as in
    the sequence layout. A sentence that fills all T positions already ends there: no change.
    """
    T = max_length
    if len(input_ids) != T or len(attention_mask) != T or len(labels) != T:
        raise PapaError(f"PAPA token layout needs rows padded to max_length={T}, got lengths "
                        f"{len(input_ids)}/{len(attention_mask)}/{len(labels)} (tokenise with padding)")
    if sep_token_id not in input_ids:
        raise PapaError(f"no separator token (id {sep_token_id}) in input_ids; the PAPA layout needs the "
                        f"tokenizer to add special tokens")
    input_ids, attention_mask, labels = list(input_ids), list(attention_mask), list(labels)
    sep = len(input_ids) - 1 - input_ids[::-1].index(sep_token_id)
    if sep != T - 1:
        input_ids[sep], attention_mask[sep], labels[sep] = pad_token_id, 0, IGNORE_INDEX
        input_ids[T - 1], attention_mask[T - 1], labels[T - 1] = sep_token_id, 1, IGNORE_INDEX
    return input_ids, attention_mask, labels


def b_to_i_label_ids(label_list: list[str]) -> list[int]:
    """For each label id, the id later sub-tokens of a word get: B-X -> I-X when I-X exists (HF run_ner)."""
    ids = []
    for idx, label in enumerate(label_list):
        inside = "I-" + label[2:] if label.startswith("B-") else None
        ids.append(label_list.index(inside) if inside in label_list else idx)
    return ids


def tokenize_token_examples(tokenizer, examples: dict, max_length, papa_layout: bool, pad_to_max_length: bool,
                            label_all_tokens: bool, label_list: list[str], causal: bool = False) -> dict:
    """Tokenise pre-split words ("tokens") and align their tags ("tags", ids or strings) to sub-tokens.

    A word's tag goes to its first sub-token; the other sub-tokens get -100, or with
    `label_all_tokens` the word's tag with B-X turned into I-X. Special tokens and padding get -100.
    RoBERTa tokenizers need add_prefix_space=True for pre-split words. A decoder's (`causal`) PAPA
    layout is the right-padded row itself: there is no separator to move to T-1.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise PapaError("token tasks need a fast tokenizer (word_ids() aligns tags to sub-tokens)")
    padding = "max_length" if pad_to_max_length or papa_layout else False
    if padding:
        check_right_padding(tokenizer)
    encoding = tokenizer(examples["tokens"], padding=padding, max_length=max_length, truncation=True,
                         is_split_into_words=True)
    result = dict(encoding)
    label_to_id = {label: i for i, label in enumerate(label_list)}
    continuation_id = b_to_i_label_ids(label_list)
    all_labels = []
    for i, tags in enumerate(examples["tags"]):
        tag_ids = [label_to_id[t] if isinstance(t, str) else int(t) for t in tags]
        row, previous_word = [], None
        for word in encoding.word_ids(batch_index=i):
            if word is None:
                row.append(IGNORE_INDEX)
            elif word != previous_word:
                row.append(tag_ids[word])
            else:
                row.append(continuation_id[tag_ids[word]] if label_all_tokens else IGNORE_INDEX)
            previous_word = word
        all_labels.append(row)
    result["labels"] = all_labels
    if papa_layout and not causal:
        for i in range(len(all_labels)):
            result["input_ids"][i], result["attention_mask"][i], result["labels"][i] = papa_token_layout(
                result["input_ids"][i], result["attention_mask"][i], result["labels"][i],
                tokenizer.sep_token_id, tokenizer.pad_token_id, max_length)
    return result


def tokenize_dataset(task, dataset_dict, tokenizer, label_list, max_length, papa_layout, pad_to_max_length,
                     label_all_tokens=False, original_token_types=False, num_proc=None, causal=False):
    """`dataset_dict` (a DatasetDict of `task`) tokenised, labels in "labels", the original columns dropped.

    `num_proc`: processes for `datasets.map` (--preprocessing_num_workers); `causal`: the model is a
    decoder (its PAPA layout: `decoder_sequence_layout`).
    """
    import datasets  # lazy: the layout functions above need no datasets
    if task.kind == "token":
        def tokenize(batch):
            return tokenize_token_examples(tokenizer, batch, max_length, papa_layout, pad_to_max_length,
                                           label_all_tokens, label_list, causal)
    else:
        first, second = (task.text_columns + (None,))[:2]

        def tokenize(batch):
            return tokenize_sequence_examples(tokenizer, batch, first, second, max_length, papa_layout,
                                              pad_to_max_length, original_token_types, causal)
    return datasets.DatasetDict({split: dataset.map(tokenize, batched=True, remove_columns=dataset.column_names,
                                                    num_proc=num_proc, desc="Tokenising")
                                 for split, dataset in dataset_dict.items()})
