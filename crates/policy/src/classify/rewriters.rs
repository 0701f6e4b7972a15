//! Programs that rewrite the files they are given (docs/design.md, "Modes and the
//! classifier"): converters and formatters whose operands are written in place, always or
//! with the option the table marks `inplace`. Their options are many and harmless but for
//! those listed: one the table does not know is read as a flag.

use super::specs::{spec, Operands, RawSpec};

const fn rewriter(
    names: &'static [&'static str],
    leading: usize,
    always: bool,
    options: &'static str,
) -> RawSpec {
    RawSpec {
        unknown_harmless: true,
        ..spec(names, Operands::Rewritten { leading, always }, options)
    }
}

pub(super) const REWRITERS: &[RawSpec] = &[
    rewriter(
        &["dos2unix", "unix2dos", "mac2unix", "unix2mac"],
        0,
        true,
        "c,convmode= i,info=?:query",
    ),
    rewriter(
        &["sd"],
        2,
        true,
        "p,preview:query n,max-replacements= f,flags=",
    ),
    rewriter(
        &["black"],
        0,
        true,
        "check:query diff:query l,line-length= t,target-version= c,code:query config= \
         include= exclude= extend-exclude= force-exclude= W,workers=",
    ),
    rewriter(
        &["isort"],
        0,
        true,
        "c,check-only,check:query diff:query stdout:query settings-path= sp= l,line-length= \
         profile=",
    ),
    rewriter(
        &["rustfmt"],
        0,
        true,
        "check:query emit= edition= config-path= config= color=",
    ),
    rewriter(
        &["gofmt", "goimports"],
        0,
        false,
        "w:inplace r= cpuprofile=",
    ),
    rewriter(
        &["clang-format"],
        0,
        false,
        "i:inplace style= assume-filename= fallback-style= lines= offset= length= \
         n,dry-run:query",
    ),
    rewriter(
        &["shfmt"],
        0,
        false,
        "w,write:inplace i,indent= ln,language-dialect=",
    ),
    rewriter(
        &["autopep8"],
        0,
        false,
        "i,in-place:inplace d,diff:query max-line-length= select= ignore= j,jobs=",
    ),
    rewriter(
        &["yq"],
        1,
        false,
        "i,inplace:inplace o,output-format= p,input-format= I,indent= e,exit-status",
    ),
    rewriter(&["perltidy"], 0, false, "b:inplace pro= o= bext="),
];
