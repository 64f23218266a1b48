#!/usr/bin/env python3
"""Writes a text file's token ids as the flat binary file `trellis run --data`
reads (uint16 by default, uint32 with --dtype uint32).

Needs the `tokenizers` package from PyPI (pip install tokenizers). Either
trains a byte-level BPE tokenizer of --vocab ids on the text itself (no
download; the ids fit a model whose vocab_size is at least --vocab), or
loads a Hugging Face tokenizer by name or tokenizer.json path (--tokenizer
gpt2 downloads it once; its ids fit GPT-2's 50257-id vocabulary).

  python3 scripts/tokenize_text.py corpus.txt tokens.bin --vocab 256
  python3 scripts/tokenize_text.py corpus.txt tokens.bin --tokenizer gpt2
"""
import argparse
import array
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", help="a UTF-8 text file")
    parser.add_argument("output", help="the token file to write")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--vocab", type=int,
                        help="train a byte-level BPE of this many ids")
    source.add_argument("--tokenizer",
                        help="a Hugging Face tokenizer name or tokenizer.json")
    parser.add_argument("--dtype", choices=["uint16", "uint32"],
                        default="uint16")
    args = parser.parse_args()
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        sys.exit("tokenize_text.py: needs the tokenizers package: "
                 "pip install tokenizers")
    if args.vocab is not None:
        # Byte-level: 256 byte ids first, then merges up to --vocab.
        if args.vocab < 256:
            sys.exit(f"tokenize_text.py: --vocab: expected >= 256 (the byte "
                     f"alphabet), found {args.vocab}")
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=args.vocab,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False)
        tokenizer.train([args.text], trainer)
    elif args.tokenizer.endswith(".json"):
        tokenizer = Tokenizer.from_file(args.tokenizer)
    else:
        tokenizer = Tokenizer.from_pretrained(args.tokenizer)
    with open(args.text, encoding="utf-8") as f:
        ids = tokenizer.encode(f.read()).ids
    limit = 1 << (16 if args.dtype == "uint16" else 32)
    if ids and max(ids) >= limit:
        sys.exit(f"tokenize_text.py: id {max(ids)} does not fit {args.dtype}: "
                 f"use --dtype uint32")
    values = array.array("H" if args.dtype == "uint16" else "I", ids)
    if sys.byteorder != "little":
        values.byteswap()
    with open(args.output, "wb") as f:
        values.tofile(f)
    print(f"{len(ids)} tokens (largest id {max(ids) if ids else 0}) written "
          f"to {args.output} as {args.dtype}")


if __name__ == "__main__":
    main()
