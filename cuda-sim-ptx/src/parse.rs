//! The module-level parser: directives, variables, function signatures and bodies. Bodies
//! are handed statement by statement to `decode` (in `decode.rs`), with the names and the
//! function under construction (`scope.rs`) that both of them read.

use std::collections::HashMap;

use crate::ir::{Callee, Func, R, T};
use crate::lex::{Tok, lex, parse_int};
use crate::scope::*;
use crate::{Entry, GlobalVar, LoadError, Module, Param, Space};

pub(crate) struct Parser<'a> {
    /// Source lines, for the instruction text of fault reports.
    src: Vec<&'a str>,
    toks: Vec<Tok<'a>>,
    lines: Vec<u32>,
    pub(crate) i: usize,
    pub(crate) module_names: HashMap<&'a str, Name>,
    pub(crate) funcs: Vec<Func>,
    pub(crate) globals: Vec<GlobalVar>,
    entries: Vec<(Entry, usize)>,
    /// Static `.shared` variables (size, align), in the order of the text; `Name::Shared(i)`
    /// indexes this. Laid out per entry in `finish`.
    shared_vars: Vec<(u64, u64)>,
    pub(crate) dyn_shared: bool,
    dyn_shared_align: u64,
    /// The `.version` directive's ISA version, (major, minor).
    version: (u32, u32),
}

/// Size of a declared element type (`.b8`, `.f32`, …), also for param layout.
fn elem_size(w: &str) -> Option<u64> {
    Some(match w {
        "u8" | "s8" | "b8" => 1,
        "u16" | "s16" | "b16" | "f16" | "bf16" => 2,
        "u32" | "s32" | "b32" | "f32" | "f16x2" | "bf16x2" => 4,
        "u64" | "s64" | "b64" | "f64" => 8,
        _ => return None,
    })
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.i).copied()
    }
    fn peek2(&self) -> Option<Tok<'a>> {
        self.toks.get(self.i + 1).copied()
    }
    fn line(&self) -> u32 {
        self.lines
            .get(self.i.min(self.lines.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }
    fn err(&self, msg: &str) -> LoadError {
        inv(format!("line {}: {msg}", self.line()))
    }
    fn next(&mut self) -> Result<Tok<'a>, LoadError> {
        let t = self.peek().ok_or_else(|| inv("unexpected end of text"))?;
        self.i += 1;
        Ok(t)
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(Tok::P(c)) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), LoadError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }
    fn id(&mut self) -> Result<&'a str, LoadError> {
        match self.next()? {
            Tok::Id(s) => Ok(s),
            _ => {
                self.i -= 1;
                Err(self.err("expected a name"))
            }
        }
    }
    fn num(&mut self) -> Result<u64, LoadError> {
        match self.next()? {
            Tok::Num(s) => parse_int(s).ok_or_else(|| self.err(&format!("bad number {s}"))),
            _ => {
                self.i -= 1;
                Err(self.err("expected a number"))
            }
        }
    }
    fn skip_to_semicolon(&mut self) -> Result<(), LoadError> {
        while self.next()? != Tok::P(b';') {}
        Ok(())
    }

    /// Reads `.align N`-style words of a declaration up to (not including) the name.
    /// Returns the directive words (without dots) and the `.align` value if any.
    fn decl_words(&mut self) -> Result<(Vec<&'a str>, Option<u64>), LoadError> {
        let mut words = Vec::new();
        let mut align = None;
        while let Some(Tok::Id(s)) = self.peek() {
            if !s.starts_with('.') {
                break;
            }
            self.i += 1;
            for w in s.split('.').filter(|w| !w.is_empty()) {
                if w == "align" {
                    let v = self.num()?;
                    if !v.is_power_of_two() {
                        return Err(self.err("alignment is not a power of two"));
                    }
                    // After `.ptr`, the alignment is of the pointee: no layout effect.
                    if !words.contains(&"ptr") {
                        align = Some(v);
                    }
                } else {
                    words.push(w);
                }
            }
        }
        Ok((words, align))
    }

    /// `name`, `name[N]`, `name[]`, `name<N>`: returns (name, element count or None for `[]`).
    fn decl_name(&mut self) -> Result<(&'a str, Option<u64>), LoadError> {
        let name = self.id()?;
        let mut count = Some(1u64);
        while self.eat(b'[') {
            if self.eat(b']') {
                count = None;
            } else {
                let n = self.num()?;
                self.expect(b']')?;
                count = count.map(|c| c.saturating_mul(n));
            }
        }
        Ok((name, count))
    }

    /// One `.param` in a signature: (name, size, align).
    fn param_decl(&mut self) -> Result<(&'a str, u64, u64), LoadError> {
        let (words, align) = self.decl_words()?;
        if words.first() != Some(&"param") {
            return Err(match words.first() {
                Some(&"reg") => LoadError::NotSupported(".reg parameters".into()),
                _ => self.err("expected .param"),
            });
        }
        let mut size = None;
        for w in &words[1..] {
            match *w {
                "ptr" | "global" | "const" | "shared" | "local" => {}
                other => match elem_size(other) {
                    Some(s) if size.is_none() => size = Some(s),
                    _ => return Err(self.err(&format!("bad parameter type .{other}"))),
                },
            }
        }
        let size = size.ok_or_else(|| self.err("parameter without a type"))?;
        let (name, count) = self.decl_name()?;
        let count = count
            .filter(|&c| c > 0)
            .ok_or_else(|| self.err("bad parameter size"))?;
        // Its place in the layout is checked against the limits by the caller.
        let bytes = size
            .checked_mul(count)
            .ok_or_else(|| self.err(&format!("parameter {name} too large")))?;
        Ok((name, bytes, align.unwrap_or(size)))
    }

    /// `( decl, decl, ... )` (the opening parenthesis already read).
    fn param_list(&mut self) -> Result<Vec<(&'a str, u64, u64)>, LoadError> {
        let mut out = Vec::new();
        if self.eat(b')') {
            return Ok(out);
        }
        loop {
            out.push(self.param_decl()?);
            if self.eat(b')') {
                return Ok(out);
            }
            self.expect(b',')?;
        }
    }

    /// Initialiser values, flattened: numbers with their sign.
    fn init_values(&mut self, out: &mut Vec<(&'a str, bool)>) -> Result<(), LoadError> {
        if self.eat(b'{') {
            if self.eat(b'}') {
                return Ok(());
            }
            loop {
                self.init_values(out)?;
                if self.eat(b'}') {
                    return Ok(());
                }
                self.expect(b',')?;
            }
        }
        let neg = self.eat(b'-');
        match self.next()? {
            Tok::Num(s) => {
                out.push((s, neg));
                Ok(())
            }
            Tok::Id(s) => Err(LoadError::NotSupported(format!(
                "address initialiser ({s})"
            ))),
            _ => Err(self.err("bad initialiser")),
        }
    }

    /// A `.global/.const/.shared/.local` declaration after its state-space word was read as
    /// part of `words`. Declares the names in `fcx` (function scope) or module scope.
    fn var_decl(
        &mut self,
        words: &[&'a str],
        align: Option<u64>,
        extern_: bool,
        mut fcx: Option<&mut FnCtx<'a>>,
    ) -> Result<(), LoadError> {
        let space = words[0];
        let mut ty = None;
        let mut vec = 1u64;
        for w in &words[1..] {
            match *w {
                "v2" => vec = 2,
                "v4" => vec = 4,
                "v8" => vec = 8,
                "extern" | "visible" | "weak" => {}
                other if elem_size(other).is_some() && ty.is_none() => ty = Some(other),
                other => return Err(LoadError::NotSupported(format!(".{space} .{other}"))),
            }
        }
        let ty = ty.ok_or_else(|| self.err("variable without a type"))?;
        let esize = elem_size(ty).unwrap_or(1) * vec;
        loop {
            let (name, count) = self.decl_name()?;
            let mut init = Vec::new();
            if self.eat(b'=') {
                let mut vals = Vec::new();
                self.init_values(&mut vals)?;
                let t = T::from_name(ty)
                    .ok_or_else(|| LoadError::NotSupported(format!("initialiser of .{ty}")))?;
                for (s, neg) in vals {
                    let v = crate::decode::imm_bits(s, neg, t)
                        .ok_or_else(|| self.err(&format!("bad initialiser value {s}")))?;
                    init.extend_from_slice(&v.to_le_bytes()[..t.bytes() as usize]);
                }
            }
            let align = align.unwrap_or(esize).max(1);
            let size = match count {
                Some(c) => c.saturating_mul(esize),
                None => init.len() as u64,
            };
            if init.len() as u64 > size {
                return Err(self.err("initialiser larger than the variable"));
            }
            if size > MAX_VAR_BYTES {
                return Err(LoadError::NotSupported(format!(
                    "variable {name} of {size} bytes"
                )));
            }
            let meaning = match space {
                "global" | "const" => {
                    if extern_ {
                        return Err(LoadError::NotSupported(format!(
                            ".extern .{space} variable {name} (linking)"
                        )));
                    }
                    init.resize(size as usize, 0);
                    self.globals.push(GlobalVar {
                        name: name.to_string(),
                        space: if space == "global" {
                            Space::Global
                        } else {
                            Space::Const
                        },
                        size,
                        align,
                        init,
                    });
                    Name::Global(self.globals.len() - 1)
                }
                "shared" => {
                    if extern_ || count.is_none() {
                        self.dyn_shared = true;
                        self.dyn_shared_align = self.dyn_shared_align.max(align);
                        // The dynamic window: its base is known per entry in `finish`.
                        Name::Shared(u64::MAX)
                    } else {
                        self.shared_vars.push((size, align));
                        Name::Shared((self.shared_vars.len() - 1) as u64)
                    }
                }
                "local" => {
                    let f = fcx.as_deref_mut().ok_or_else(|| {
                        LoadError::NotSupported("module-scope .local variable".into())
                    })?;
                    let (off, top) = place(f.local_top, size, align)
                        .filter(|&(_, t)| t <= MAX_VAR_BYTES)
                        .ok_or_else(|| inv(format!("{}: local memory too large", f.f.name)))?;
                    f.local_top = top;
                    Name::Local(off)
                }
                "param" => {
                    let f = fcx
                        .as_deref_mut()
                        .ok_or_else(|| self.err("module-scope .param"))?;
                    let off = f.alloc_param(size, align)?;
                    Name::FParam(off)
                }
                other => return Err(LoadError::NotSupported(format!(".{other} variable"))),
            };
            match fcx.as_deref_mut() {
                Some(f) => f.declare(name, meaning),
                None => {
                    if self.module_names.insert(name, meaning).is_some() {
                        return Err(self.err(&format!("{name} declared twice")));
                    }
                }
            }
            if self.eat(b';') {
                return Ok(());
            }
            self.expect(b',')?;
        }
    }

    fn func_index(&mut self, name: &'a str) -> Result<usize, LoadError> {
        match self.module_names.get(name) {
            Some(Name::Func(i)) => Ok(*i),
            Some(_) => Err(self.err(&format!("{name} declared twice"))),
            None => {
                self.funcs.push(Func {
                    name: name.to_string(),
                    ..Func::default()
                });
                let i = self.funcs.len() - 1;
                self.module_names.insert(name, Name::Func(i));
                Ok(i)
            }
        }
    }

    /// `.entry` / `.func` after that word.
    fn function(&mut self, is_entry: bool) -> Result<(), LoadError> {
        let mut rets = Vec::new();
        if !is_entry && self.eat(b'(') {
            rets = self.param_list()?;
        }
        let name = self.id()?;
        let mut args = Vec::new();
        if self.eat(b'(') {
            args = self.param_list()?;
        }
        // Performance and other header directives.
        loop {
            match self.peek() {
                Some(Tok::Id(
                    ".maxntid" | ".reqntid" | ".minnctapersm" | ".maxnreg" | ".maxnctapersm"
                    | ".reqnctapercluster" | ".maxclusterrank",
                )) => {
                    self.i += 1;
                    self.num()?;
                    while self.eat(b',') {
                        self.num()?;
                    }
                }
                Some(Tok::Id(".noreturn" | ".explicitcluster")) => self.i += 1,
                Some(Tok::Id(".pragma")) => {
                    self.i += 1;
                    self.skip_to_semicolon()?;
                }
                _ => break,
            }
        }
        let index = self.func_index(name)?;
        if is_entry && self.entries.iter().any(|(e, _)| e.name == name) {
            return Err(self.err(&format!("entry {name} defined twice")));
        }
        if self.eat(b';') {
            // A prototype: the signature only.
            if is_entry {
                return Err(self.err("entry without a body"));
            }
            let f = &mut self.funcs[index];
            if !f.has_body {
                let mut area = 0u64;
                f.rets.clear();
                f.args.clear();
                let too_large = || inv(format!("{name}: parameter space too large"));
                for (k, (_, size, align)) in rets.iter().chain(&args).enumerate() {
                    let (off, top) = place(area, *size, *align)
                        .filter(|&(_, t)| t <= MAX_VAR_BYTES)
                        .ok_or_else(too_large)?;
                    if k < rets.len() {
                        f.rets.push((off, *size));
                    } else {
                        f.args.push((off, *size));
                    }
                    area = top;
                }
                f.param_area = area;
            }
            return Ok(());
        }
        if self.funcs[index].has_body {
            return Err(self.err(&format!("function {name} defined twice")));
        }
        self.expect(b'{')?;
        let mut fcx = FnCtx {
            f: Func {
                name: name.to_string(),
                is_entry,
                has_body: true,
                ..Func::default()
            },
            scopes: vec![Scope::default(), Scope::default()],
            consts: HashMap::new(),
            labels: HashMap::new(),
            fixups: Vec::new(),
            sink: None,
            local_top: 0,
        };
        if is_entry {
            let mut params = Vec::new();
            let mut offset = 0u64;
            for (pname, size, align) in &args {
                let (off, top) = place(offset, *size, *align)
                    .filter(|&(_, t)| t <= MAX_ENTRY_PARAM_BYTES)
                    .ok_or_else(|| {
                        inv(format!(
                            "entry {name}: parameter space exceeds {MAX_ENTRY_PARAM_BYTES} bytes"
                        ))
                    })?;
                params.push(Param {
                    offset: off as usize,
                    size: *size as usize,
                });
                fcx.declare(pname, Name::KParam(off));
                offset = top;
            }
            // Every kernel, `.visible` or not: a kernel of internal linkage (nvcc's
            // `static __global__`, its template instances in a whole-program build) is found
            // by name all the same, as the CUDA runtime's registrations find it.
            self.entries.push((
                Entry {
                    name: name.to_string(),
                    params,
                },
                index,
            ));
        } else {
            for (pname, size, align) in &rets {
                let off = fcx.alloc_param(*size, *align)?;
                fcx.f.rets.push((off, *size));
                fcx.declare(pname, Name::FParam(off));
            }
            for (pname, size, align) in &args {
                let off = fcx.alloc_param(*size, *align)?;
                fcx.f.args.push((off, *size));
                fcx.declare(pname, Name::FParam(off));
            }
        }
        self.body(&mut fcx)?;
        for (at, label) in std::mem::take(&mut fcx.fixups) {
            let target = *fcx
                .labels
                .get(label)
                .ok_or_else(|| inv(format!("{name}: unknown label {label}")))?;
            if let crate::ir::Op::Bra { target: t } = &mut fcx.f.code[at].op {
                *t = target;
            }
        }
        // A body that falls off its end returns.
        fcx.f.code.push(crate::ir::Ins {
            guard: 0,
            op: crate::ir::Op::Ret,
        });
        fcx.f.text.push("(end of function)".into());
        fcx.f.local_size = fcx.local_top.next_multiple_of(16);
        if fcx.f.local_size > 16 << 20 {
            return Err(inv(format!("{name}: local memory too large")));
        }
        self.funcs[index] = fcx.f;
        Ok(())
    }

    fn body(&mut self, fcx: &mut FnCtx<'a>) -> Result<(), LoadError> {
        let mut depth = 1;
        loop {
            let tok = self.next()?;
            match tok {
                Tok::P(b'{') => {
                    depth += 1;
                    fcx.scopes.push(Scope::default());
                }
                Tok::P(b'}') => {
                    depth -= 1;
                    fcx.scopes.pop();
                    if depth == 0 {
                        return Ok(());
                    }
                }
                Tok::P(b';') => {}
                Tok::Id(s) if self.peek() == Some(Tok::P(b':')) && !s.starts_with('.') => {
                    self.i += 1;
                    fcx.labels.insert(s, fcx.f.code.len() as u32);
                }
                Tok::Id(".reg") => self.reg_decl(fcx)?,
                Tok::Id(".pragma") => self.skip_to_semicolon()?,
                Tok::Id(".loc") => {
                    self.num()?;
                    self.num()?;
                    self.num()?;
                    while self.eat(b',') {
                        match self.id()? {
                            "function_name" => {
                                self.id()?;
                                if self.eat(b'+') {
                                    self.num()?;
                                }
                            }
                            "inlined_at" => {
                                self.num()?;
                                self.num()?;
                                self.num()?;
                            }
                            other => return Err(self.err(&format!("bad .loc part {other}"))),
                        }
                    }
                }
                Tok::Id(s) if s.starts_with('.') => {
                    self.i -= 1;
                    let (words, align) = self.decl_words()?;
                    let mut extern_ = false;
                    let mut w = words.as_slice();
                    while let Some((first, rest)) = w.split_first() {
                        match *first {
                            "extern" => extern_ = true,
                            "visible" | "weak" => {}
                            _ => break,
                        }
                        w = rest;
                    }
                    match w.first() {
                        Some(&("local" | "shared" | "global" | "const" | "param")) => {
                            self.var_decl(w, align, extern_, Some(fcx))?
                        }
                        _ => return Err(LoadError::NotSupported(format!("directive {s}"))),
                    }
                }
                Tok::P(b'@') => {
                    let neg = self.eat(b'!');
                    let p = self.id()?;
                    let r = match fcx.lookup(p) {
                        Some(Name::Reg(r)) => r,
                        _ => return Err(self.err(&format!("unknown predicate {p}"))),
                    };
                    let guard = ((r << 1) | neg as u32) + 1;
                    let op = self.id()?;
                    self.instruction(fcx, op, guard)?;
                }
                Tok::Id(op) => self.instruction(fcx, op, 0)?,
                _ => return Err(self.err("unexpected token in function body")),
            }
        }
    }

    fn reg_decl(&mut self, fcx: &mut FnCtx<'a>) -> Result<(), LoadError> {
        let (words, _) = self.decl_words()?;
        if words.iter().any(|w| w.starts_with('v') && w.len() == 2) {
            return Err(LoadError::NotSupported(
                ".reg .v2/.v4 vector registers".into(),
            ));
        }
        loop {
            let name = self.id()?;
            if self.eat(b'<') {
                let n = self.num()?;
                self.expect(b'>')?;
                if n > 1 << 20 {
                    return Err(self.err("too many registers"));
                }
                let first = fcx.f.nregs as R;
                for _ in 0..n {
                    fcx.new_reg();
                }
                if let Some(s) = fcx.scopes.last_mut() {
                    s.ranges.insert(name, (first, n));
                }
            } else {
                let r = fcx.new_reg();
                fcx.declare(name, Name::Reg(r));
            }
            if self.eat(b';') {
                return Ok(());
            }
            self.expect(b',')?;
        }
    }

    fn operand(&mut self) -> Result<Opd<'a>, LoadError> {
        match self.next()? {
            Tok::P(b'[') => {
                let mut base = None;
                let mut off = 0i64;
                match self.next()? {
                    Tok::Id(s) if self.peek() == Some(Tok::P(b',')) => {
                        self.i += 1;
                        let coords = match self.operand()? {
                            Opd::Vec(v) => v,
                            _ => return Err(self.err("expected {coordinates}")),
                        };
                        self.expect(b']')?;
                        return Ok(Opd::Tensor(s, coords));
                    }
                    Tok::Id(s) => base = Some(s),
                    Tok::Num(s) => {
                        off = parse_int(s).ok_or_else(|| self.err("bad address"))? as i64
                    }
                    _ => return Err(self.err("bad address")),
                }
                loop {
                    let sign = if self.eat(b'+') {
                        1
                    } else if self.eat(b'-') {
                        -1
                    } else {
                        break;
                    };
                    let sign = if self.eat(b'-') { -sign } else { sign };
                    let v = self.num()? as i64;
                    off = off.wrapping_add(sign * v);
                }
                self.expect(b']')?;
                Ok(Opd::Addr(base, off))
            }
            Tok::P(b'{') => {
                let mut v = Vec::new();
                loop {
                    v.push(self.operand()?);
                    if self.eat(b'}') {
                        return Ok(Opd::Vec(v));
                    }
                    self.expect(b',')?;
                }
            }
            Tok::P(b'(') => {
                let mut v = Vec::new();
                if self.eat(b')') {
                    return Ok(Opd::Paren(v));
                }
                loop {
                    v.push(self.id()?);
                    if self.eat(b')') {
                        return Ok(Opd::Paren(v));
                    }
                    self.expect(b',')?;
                }
            }
            Tok::P(b'!') => Ok(Opd::NotName(self.id()?)),
            Tok::P(b'-') => match self.next()? {
                Tok::Num(s) => Ok(Opd::Imm(s, true)),
                _ => Err(self.err("bad operand")),
            },
            Tok::Num(s) => Ok(Opd::Imm(s, false)),
            Tok::Id(s) => {
                if self.eat(b'|') {
                    return Ok(Opd::Pair(s, self.id()?));
                }
                if self.peek() == Some(Tok::P(b'+')) && matches!(self.peek2(), Some(Tok::Num(_))) {
                    self.i += 1;
                    let v = self.num()? as i64;
                    return Ok(Opd::SymOff(s, v));
                }
                Ok(Opd::Name(s))
            }
            _ => Err(self.err("bad operand")),
        }
    }

    fn instruction(
        &mut self,
        fcx: &mut FnCtx<'a>,
        op: &'a str,
        guard: u32,
    ) -> Result<(), LoadError> {
        let start = self.i;
        let base = op.split('.').next().unwrap_or("");
        if !crate::decode::KNOWN.contains(&base) {
            // Unknown instruction (texture, surface, tensor-core …): named, whatever its
            // operand syntax.
            return Err(LoadError::NotSupported(op.to_string()));
        }
        let mut ops = Vec::new();
        if !self.eat(b';') {
            loop {
                ops.push(self.operand()?);
                if self.eat(b';') {
                    break;
                }
                self.expect(b',')?;
            }
        }
        let line = self.lines.get(start).copied().unwrap_or(0);
        let src = self
            .src
            .get(line.saturating_sub(1) as usize)
            .map_or("", |l| l.trim());
        let src = src.split("//").next().unwrap_or("").trim();
        let text = if src.contains(op) {
            format!("{src} (line {line})")
        } else {
            format!("{op} (line {line})")
        };
        crate::decode::decode(&self.module_names, fcx, op, &ops, guard, text)
    }
}

/// `major.minor` of a `.version` directive.
fn isa_version(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

pub(crate) fn parse_module(text: &str) -> Result<Module, LoadError> {
    let (toks, lines) = lex(text)?;
    if !toks.contains(&Tok::Id(".version")) {
        return Err(inv("not PTX: no .version directive"));
    }
    let module = {
        let mut p = Parser {
            src: text.lines().collect(),
            toks,
            lines,
            i: 0,
            module_names: HashMap::new(),
            funcs: Vec::new(),
            globals: Vec::new(),
            entries: Vec::new(),
            shared_vars: Vec::new(),
            dyn_shared: false,
            dyn_shared_align: 16,
            version: (0, 0),
        };
        let r = p.module();
        let out = r.and_then(|()| p.finish());
        drop(p);
        out?
    };
    Ok(module)
}

impl<'a> Parser<'a> {
    fn module(&mut self) -> Result<(), LoadError> {
        let mut extern_ = false;
        while let Some(tok) = self.peek() {
            match tok {
                Tok::Id(".version") => {
                    self.i += 1;
                    let version = match self.next()? {
                        Tok::Num(text) => isa_version(text),
                        _ => None,
                    };
                    self.version = version.ok_or_else(|| self.err("bad .version"))?;
                }
                Tok::Id(".target") => {
                    self.i += 1;
                    self.id()?;
                    while self.eat(b',') {
                        self.id()?;
                    }
                }
                Tok::Id(".address_size") => {
                    self.i += 1;
                    if self.num()? != 64 {
                        return Err(LoadError::NotSupported(".address_size 32".into()));
                    }
                }
                Tok::Id(".file") => {
                    self.i += 1;
                    self.num()?;
                    match self.next()? {
                        Tok::Str(_) => {}
                        _ => return Err(self.err("bad .file")),
                    }
                    while self.eat(b',') {
                        self.num()?;
                    }
                }
                Tok::Id(".pragma") => {
                    self.i += 1;
                    self.skip_to_semicolon()?;
                }
                Tok::Id(".section") => {
                    self.i += 1;
                    self.id()?;
                    self.expect(b'{')?;
                    let mut depth = 1;
                    while depth > 0 {
                        match self.next()? {
                            Tok::P(b'{') => depth += 1,
                            Tok::P(b'}') => depth -= 1,
                            _ => {}
                        }
                    }
                }
                Tok::Id(".visible" | ".weak" | ".common") => {
                    // Linkage: every kernel is found by name (see `function`).
                    self.i += 1;
                }
                Tok::Id(".extern") => {
                    self.i += 1;
                    extern_ = true;
                }
                Tok::Id(".entry") => {
                    self.i += 1;
                    self.function(true)?;
                    extern_ = false;
                }
                Tok::Id(".func") => {
                    self.i += 1;
                    self.function(false)?;
                    extern_ = false;
                }
                Tok::Id(s)
                    if s.starts_with(".global")
                        || s.starts_with(".const")
                        || s.starts_with(".shared")
                        || s.starts_with(".local") =>
                {
                    let (words, align) = self.decl_words()?;
                    let ext = extern_ || words.contains(&"extern");
                    self.var_decl(&words, align, ext, None)?;
                    extern_ = false;
                }
                Tok::Id(s) => {
                    return Err(LoadError::NotSupported(format!("module directive {s}")));
                }
                _ => return Err(self.err("unexpected token at module scope")),
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<Module, LoadError> {
        // Resolve call targets.
        let names: HashMap<String, usize> = self
            .funcs
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        for fi in 0..self.funcs.len() {
            for ci in 0..self.funcs[fi].calls.len() {
                let Callee::Named(name) = self.funcs[fi].calls[ci].callee.clone() else {
                    continue;
                };
                let target = names.get(&name).copied();
                let callee = match target {
                    Some(t) if self.funcs[t].is_entry => {
                        return Err(inv(format!("call to entry {name}")));
                    }
                    Some(t) if self.funcs[t].has_body => {
                        let f = &self.funcs[t];
                        let site = &self.funcs[fi].calls[ci];
                        if site.args.len() != f.args.len() || site.rets.len() > f.rets.len() {
                            return Err(inv(format!("call to {name}: wrong argument count")));
                        }
                        Callee::Func(t)
                    }
                    _ if name == "vprintf" => Callee::Vprintf,
                    _ if name == "__assertfail" => Callee::AssertFail,
                    _ if name == "cudaGraphSetConditional" => Callee::SetConditional,
                    _ => {
                        return Err(LoadError::NotSupported(format!(
                            "call to external function {name}"
                        )));
                    }
                };
                self.funcs[fi].calls[ci].callee = callee;
            }
        }
        if self.entries.is_empty() {
            return Err(inv("no entry"));
        }
        let mut const_total = 0u64;
        for g in &self.globals {
            if g.space == Space::Const {
                const_total = const_total.saturating_add(g.size);
            }
        }
        if const_total > MAX_CONST_BYTES {
            return Err(inv(format!(
                ".const variables of {const_total} bytes exceed the {MAX_CONST_BYTES}-byte limit"
            )));
        }
        // Static shared memory per entry: the variables the entry and the functions it
        // calls (transitively) reference, in the order of the text; dynamic shared memory
        // after them.
        let mut shared_layouts = Vec::new();
        for (e, fi) in &self.entries {
            let mut used = vec![false; self.shared_vars.len()];
            let mut seen = vec![false; self.funcs.len()];
            let mut stack = vec![*fi];
            while let Some(f) = stack.pop() {
                if std::mem::replace(&mut seen[f], true) {
                    continue;
                }
                for &v in &self.funcs[f].shared_refs {
                    if let Some(u) = used.get_mut(v) {
                        *u = true;
                    }
                }
                for c in &self.funcs[f].calls {
                    if let Callee::Func(g) = c.callee {
                        stack.push(g);
                    }
                }
            }
            let mut offsets = vec![0u64; self.shared_vars.len()];
            let mut top = 0u64;
            for (v, &(size, align)) in self.shared_vars.iter().enumerate() {
                if !used[v] {
                    continue;
                }
                let (off, t) = place(top, size, align)
                    .filter(|&(_, t)| t <= MAX_STATIC_SHARED_BYTES)
                    .ok_or_else(|| {
                        inv(format!(
                            "entry {}: static shared memory exceeds {MAX_STATIC_SHARED_BYTES} bytes",
                            e.name
                        ))
                    })?;
                offsets[v] = off;
                top = t;
            }
            shared_layouts.push(crate::SharedLayout {
                offsets,
                static_bytes: top,
                dyn_base: top.next_multiple_of(self.dyn_shared_align),
            });
        }
        let (entries, entry_funcs) = std::mem::take(&mut self.entries).into_iter().unzip();
        let module = Module {
            version: self.version,
            entries,
            globals: std::mem::take(&mut self.globals),
            funcs: std::mem::take(&mut self.funcs),
            entry_funcs,
            shared_layouts,
        };
        for (i, e) in module.entries.iter().enumerate() {
            let local = module.local_bytes(i);
            if local > MAX_LOCAL_BYTES {
                return Err(inv(format!(
                    "entry {}: {local} bytes of local memory per thread exceed {MAX_LOCAL_BYTES}",
                    e.name
                )));
            }
        }
        Ok(module)
    }
}
