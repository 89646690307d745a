//! Checking a device-code image before the driver reads it.
//!
//! `cuLibraryLoadData` takes a pointer and no length: the driver reads PTX up to its NUL and a
//! cubin or fatbin as far as its own headers say. A truncated or forged binary would make it
//! read past the caller's slice, so the headers that give sizes are checked against the slice
//! first, and PTX without a NUL gets one. What the driver then finds *inside* the bounds (a
//! corrupt but in-bounds image) is its to reject, with `CUDA_ERROR_INVALID_IMAGE` or similar.

use std::borrow::Cow;

use crate::error::{Error, Result};

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The magic of a fat-binary *wrapper*, which holds a host pointer to the fatbin: never an
/// image on its own.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// The size of an `Elf64_Phdr` and of an `Elf64_Shdr`.
const PROGRAM_HEADER_SIZE: u64 = 56;
const SECTION_HEADER_SIZE: u64 = 64;
/// The size of a fatbin entry's header as the driver reads it.
const FATBIN_ENTRY_HEADER_SIZE: u64 = 64;
/// `SHT_NOBITS`: a section that occupies no bytes of the file (`.bss`).
const SECTION_WITHOUT_BYTES: u32 = 8;

/// The image as the driver may read it: the same bytes, or PTX with a NUL appended.
pub(crate) fn checked_image(image: &[u8]) -> Result<Cow<'_, [u8]>> {
    if image.is_empty() {
        return Err(invalid("an empty image".into()));
    }
    if image.starts_with(ELF_MAGIC) {
        check_elf(image)?;
        return Ok(Cow::Borrowed(image));
    }
    if read_u32(image, 0) == Some(FATBIN_MAGIC) {
        check_fatbin(image)?;
        return Ok(Cow::Borrowed(image));
    }
    if read_u32(image, 0) == Some(FATBIN_WRAPPER_MAGIC) {
        return Err(invalid(
            "a fat-binary wrapper (it points at the fatbin; pass the fatbin itself)".into(),
        ));
    }
    // Anything else must be PTX text, which the driver reads up to the first NUL.
    let text_end = image
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(image.len());
    let looks_like_ptx =
        std::str::from_utf8(&image[..text_end]).is_ok_and(|text| text.contains(".version"));
    if !looks_like_ptx {
        return Err(invalid(
            "neither a cubin (ELF), a fatbin nor PTX text (no `.version` directive)".into(),
        ));
    }
    if text_end < image.len() {
        return Ok(Cow::Borrowed(image));
    }
    let mut text = Vec::with_capacity(image.len() + 1);
    text.extend_from_slice(image);
    text.push(0);
    Ok(Cow::Owned(text))
}

/// A 64-bit little-endian ELF file whose header tables and sections lie inside `image`.
fn check_elf(image: &[u8]) -> Result<()> {
    if image.len() < 64 || image[4] != 2 || image[5] != 1 {
        return Err(invalid(
            "an ELF image that is not a complete 64-bit little-endian header".into(),
        ));
    }
    let field = |offset, size| read_le(image, offset, size).unwrap_or(u64::MAX);
    let (header_size, program_offset, section_offset) =
        (field(0x34, 2), field(0x20, 8), field(0x28, 8));
    let (program_entry, program_count) = (field(0x36, 2), field(0x38, 2));
    let (section_entry, section_count) = (field(0x3A, 2), field(0x3C, 2));
    within(image, 0, header_size, "the ELF header")?;
    if program_count > 0 && program_entry != PROGRAM_HEADER_SIZE {
        return Err(invalid(format!(
            "ELF program headers of {program_entry} bytes, not 56"
        )));
    }
    if section_count > 0 && section_entry != SECTION_HEADER_SIZE {
        return Err(invalid(format!(
            "ELF section headers of {section_entry} bytes, not 64"
        )));
    }
    if section_count == 0 && section_offset != 0 {
        // Extended numbering keeps the real count in section header 0: refused rather than
        // followed.
        return Err(invalid(
            "an ELF file with extended section numbering".into(),
        ));
    }
    within(
        image,
        program_offset,
        program_entry * program_count,
        "the ELF program headers",
    )?;
    within(
        image,
        section_offset,
        section_entry * section_count,
        "the ELF section headers",
    )?;
    for index in 0..program_count {
        let header = (program_offset + index * program_entry) as usize;
        let (offset, size) = (field(header + 0x08, 8), field(header + 0x20, 8));
        within(image, offset, size, "an ELF segment")?;
    }
    for index in 0..section_count {
        let header = section_offset + index * section_entry;
        let kind = field(header as usize + 4, 4) as u32;
        let (offset, size) = (
            field(header as usize + 0x18, 8),
            field(header as usize + 0x20, 8),
        );
        if kind != SECTION_WITHOUT_BYTES {
            within(image, offset, size, "an ELF section")?;
        }
    }
    Ok(())
}

/// A fatbin whose declared size, and each entry's, lie inside `image`.
fn check_fatbin(image: &[u8]) -> Result<()> {
    let header_size =
        read_le(image, 6, 2).ok_or_else(|| invalid("a truncated fatbin header".into()))?;
    let fat_size =
        read_le(image, 8, 8).ok_or_else(|| invalid("a truncated fatbin header".into()))?;
    within(image, header_size, fat_size, "the fatbin")?;
    let end = header_size + fat_size;
    let mut entry = header_size;
    while entry < end {
        let entry_header = read_le(image, entry as usize + 4, 4)
            .ok_or_else(|| invalid("a truncated fatbin entry".into()))?;
        let payload = read_le(image, entry as usize + 8, 8)
            .ok_or_else(|| invalid("a truncated fatbin entry".into()))?;
        if entry_header < FATBIN_ENTRY_HEADER_SIZE {
            return Err(invalid(format!(
                "a fatbin entry header of {entry_header} bytes, less than the \
                 {FATBIN_ENTRY_HEADER_SIZE} the driver reads"
            )));
        }
        let next = entry
            .checked_add(entry_header)
            .and_then(|at| at.checked_add(payload))
            .ok_or_else(|| invalid("a fatbin entry size that overflows".into()))?;
        if next > end {
            return Err(invalid(
                "a fatbin entry that extends past the fatbin".into(),
            ));
        }
        entry = next;
    }
    Ok(())
}

/// The kernels an image defines, each with its number of parameters, where the image says:
/// the `.entry` directives of PTX text ([`ptx_entries`]), the parameter records of a cubin
/// ([`cubin_entries`]), or those of a fatbin's first uncompressed cubin or PTX entry (every
/// entry of a fatbin is compiled from the same source, so all declare the same kernels).
/// `None` where none of these can be read; the caller then asks the driver.
pub(crate) fn image_entries(image: &[u8]) -> Option<Vec<(String, usize)>> {
    if image.starts_with(ELF_MAGIC) {
        return cubin_entries(image);
    }
    if read_u32(image, 0) == Some(FATBIN_MAGIC) {
        return fatbin_entries(image);
    }
    ptx_entries(image)
}

/// `EIATTR_KPARAM_INFO`: the attribute that describes one parameter of a kernel, one record
/// per parameter, in a cubin's `.nv.info.<kernel>` section.
const KERNEL_PARAMETER_RECORD: u8 = 0x17;
/// The formats of an `.nv.info` record: a byte or a half-word value (four bytes in all), or a
/// sized value (a two-byte size, then that many bytes).
const RECORD_BYTE: u8 = 2;
const RECORD_HALF: u8 = 3;
const RECORD_SIZED: u8 = 4;

/// The kernels of a cubin with their numbers of parameters: one `.nv.info.<name>` section per
/// function, holding one `EIATTR_KPARAM_INFO` record per parameter, whose ordinal (bytes 4..6
/// of its value) numbers the parameters from 0. `None` where a section cannot be read to the
/// end, or where the ordinals are not exactly `0..count`, so that a wrong count is never
/// taken: the caller then asks the driver.
fn cubin_entries(image: &[u8]) -> Option<Vec<(String, usize)>> {
    let field = |offset: u64, size: usize| read_le(image, usize::try_from(offset).ok()?, size);
    let (section_offset, section_count, names_index) =
        (field(0x28, 8)?, field(0x3C, 2)?, field(0x3E, 2)?);
    let section = |index: u64| {
        let header = section_offset.checked_add(index.checked_mul(SECTION_HEADER_SIZE)?)?;
        let (name, offset, size) = (
            field(header, 4)?,
            field(header + 0x18, 8)?,
            field(header + 0x20, 8)?,
        );
        let start = usize::try_from(offset).ok()?;
        let bytes = image.get(start..start.checked_add(usize::try_from(size).ok()?)?)?;
        Some((name, bytes))
    };
    let (_, names) = section(names_index)?;
    let mut entries = Vec::new();
    for index in 0..section_count {
        let (name_at, bytes) = section(index)?;
        let name = names.get(usize::try_from(name_at).ok()?..)?;
        let name = std::str::from_utf8(&name[..name.iter().position(|&b| b == 0)?]).ok()?;
        if let Some(kernel) = name.strip_prefix(".nv.info.") {
            entries.push((kernel.to_owned(), parameter_records(bytes)?));
        }
    }
    Some(entries)
}

/// The number of parameters an `.nv.info.<kernel>` section records (see [`cubin_entries`]).
fn parameter_records(mut records: &[u8]) -> Option<usize> {
    let mut ordinals = Vec::new();
    while !records.is_empty() {
        let (format, attribute) = (*records.first()?, *records.get(1)?);
        let length = match format {
            RECORD_BYTE | RECORD_HALF => 4,
            RECORD_SIZED => 4 + usize::try_from(read_le(records, 2, 2)?).ok()?,
            _ => return None,
        };
        let value = records.get(4..length)?;
        if format == RECORD_SIZED && attribute == KERNEL_PARAMETER_RECORD {
            ordinals.push(read_le(value, 4, 2)?);
        }
        records = records.get(length..)?;
    }
    ordinals.sort_unstable();
    let numbered = ordinals
        .iter()
        .zip(0u64..)
        .all(|(&ordinal, at)| ordinal == at);
    numbered.then_some(ordinals.len())
}

/// A fatbin entry's kinds and its compression flags (either one marks a compressed payload).
const FATBIN_PTX: u64 = 1;
const FATBIN_CUBIN: u64 = 2;
const FATBIN_COMPRESSED: u64 = 0x2000 | 0x8000;

/// The entries of a fatbin's first uncompressed cubin or PTX entry (see [`image_entries`]).
fn fatbin_entries(image: &[u8]) -> Option<Vec<(String, usize)>> {
    let field = |offset: u64, size: usize| read_le(image, usize::try_from(offset).ok()?, size);
    let header_size = field(6, 2)?;
    let end = header_size.checked_add(field(8, 8)?)?;
    let mut entry = header_size;
    while entry < end {
        let (kind, entry_header) = (field(entry, 2)?, field(entry + 4, 4)?);
        // The bytes of a file are read here unchecked (`load_file`): a header shorter than the
        // driver's would not advance the walk.
        if entry_header < FATBIN_ENTRY_HEADER_SIZE {
            return None;
        }
        let (payload, flags) = (field(entry + 8, 8)?, field(entry + 0x28, 8)?);
        let start = entry.checked_add(entry_header)?;
        let next = start.checked_add(payload)?;
        if flags & FATBIN_COMPRESSED == 0 {
            let bytes = image.get(usize::try_from(start).ok()?..usize::try_from(next).ok()?)?;
            let found = match kind {
                FATBIN_CUBIN => cubin_entries(bytes),
                FATBIN_PTX => ptx_entries(bytes),
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        entry = next;
    }
    None
}

/// The kernels a PTX image defines, each with its number of parameters: the `.entry`
/// directives of its text, as the PTX ISA writes them (`.visible .entry name(.param …, …)`).
/// `None` for an image that is not PTX (a cubin or a fatbin) or whose entries cannot be read.
/// The counts let a kernel's parameters be asked of the driver without probing past the last
/// one, which drivers before `cuKernelGetParamCount` answer with an error (see
/// `code/kernel.rs`).
pub(crate) fn ptx_entries(image: &[u8]) -> Option<Vec<(String, usize)>> {
    if image.starts_with(ELF_MAGIC)
        || matches!(
            read_u32(image, 0),
            Some(FATBIN_MAGIC | FATBIN_WRAPPER_MAGIC)
        )
    {
        return None;
    }
    let end = image.iter().position(|&b| b == 0).unwrap_or(image.len());
    let text = std::str::from_utf8(&image[..end]).ok()?;
    let code = without_comments(text);
    let mut entries = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + ".entry".len()..];
        // A whole word: `.entry` and not the tail of another directive or a name.
        if before.is_some_and(|c| !c.is_whitespace())
            || !rest.starts_with(|c: char| c.is_whitespace())
        {
            continue;
        }
        rest = rest.trim_start();
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%')))
            .unwrap_or(rest.len());
        if name_len == 0 {
            return None;
        }
        let name = rest[..name_len].to_owned();
        rest = rest[name_len..].trim_start();
        let params = match rest.strip_prefix('(') {
            Some(list) => {
                let close = list.find(')')?;
                let params = list[..close]
                    .split(',')
                    .filter(|param| !param.trim().is_empty())
                    .count();
                if list[..close].matches(".param").count() != params {
                    return None;
                }
                rest = &list[close + 1..];
                params
            }
            None => 0,
        };
        entries.push((name, params));
    }
    Some(entries)
}

/// `text` with its `//` and `/* */` comments replaced by spaces (PTX has no string literals
/// outside of `.file` names, which hold no comment markers that matter here).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        let (at, closing) = match (line, block) {
            (Some(l), Some(b)) if b < l => (b, "*/"),
            (Some(l), _) => (l, "\n"),
            (None, Some(b)) => (b, "*/"),
            (None, None) => {
                out.push_str(rest);
                return out;
            }
        };
        out.push_str(&rest[..at]);
        out.push(' ');
        rest = &rest[at + 2..];
        match rest.find(closing) {
            Some(end) if closing == "*/" => rest = &rest[end + 2..],
            Some(end) => rest = &rest[end..],
            None => return out,
        }
    }
}

/// `[offset, offset + size)` lies inside `image`.
fn within(image: &[u8], offset: u64, size: u64, what: &str) -> Result<()> {
    match offset.checked_add(size) {
        Some(end) if end <= image.len() as u64 => Ok(()),
        _ => Err(invalid(format!(
            "{what} at offset {offset} of {size} bytes lies past the {}-byte image",
            image.len()
        ))),
    }
}

fn read_le(image: &[u8], offset: usize, size: usize) -> Option<u64> {
    let bytes = image.get(offset..offset.checked_add(size)?)?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |value, byte| (value << 8) | u64::from(*byte)),
    )
}

fn read_u32(image: &[u8], offset: usize) -> Option<u32> {
    read_le(image, offset, 4).map(|value| value as u32)
}

fn invalid(what: String) -> Error {
    Error::BadImage { reason: what }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf(sections: &[(u32, u64, u64)], len: usize) -> Vec<u8> {
        let mut image = vec![0u8; len];
        image[..4].copy_from_slice(ELF_MAGIC);
        image[4] = 2;
        image[5] = 1;
        image[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        image[0x28..0x30].copy_from_slice(&64u64.to_le_bytes());
        image[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        image[0x3C..0x3E].copy_from_slice(&(sections.len() as u16).to_le_bytes());
        for (index, (kind, offset, size)) in sections.iter().enumerate() {
            let header = 64 + index * 64;
            image[header + 4..header + 8].copy_from_slice(&kind.to_le_bytes());
            image[header + 0x18..header + 0x20].copy_from_slice(&offset.to_le_bytes());
            image[header + 0x20..header + 0x28].copy_from_slice(&size.to_le_bytes());
        }
        image
    }

    #[test]
    fn ptx_gets_a_nul_and_keeps_its_text() {
        let image = checked_image(b".version 7.0").unwrap();
        assert_eq!(&image[..], b".version 7.0\0");
        assert!(matches!(
            checked_image(b".version 8.0\0"),
            Ok(Cow::Borrowed(_))
        ));
        assert!(checked_image(b"").is_err());
        // Not PTX, nor a wrapper that points elsewhere.
        assert!(checked_image(b"random bytes").is_err());
        assert!(checked_image(&[0xff, 0xfe, 0x00]).is_err());
        let mut wrapper = FATBIN_WRAPPER_MAGIC.to_le_bytes().to_vec();
        wrapper.extend_from_slice(&[0; 20]);
        assert!(checked_image(&wrapper).is_err());
    }

    #[test]
    fn ptx_entries_are_read_with_their_parameter_counts() {
        let ptx = b"
            .version 8.0
            .target sm_90 // a comment with .entry fake(.param .u32 x)
            .address_size 64
            /* .entry hidden(.param .u64 a) */
            .visible .entry saxpy(
                .param .f32 saxpy_param_0,
                .param .u64 .ptr .global .align 4 saxpy_param_1, // x
                .param .align 8 .b8 saxpy_param_2[16],
                .param .u32 saxpy_param_3
            )
            .maxntid 256, 1, 1
            { ret; }
            .visible .entry spin
            { ret; }
            .entry _Z4noneif(.param .u32 a, .param .f32 b) { ret; }
            .visible .entry empty() { ret; }
            .func helper(.param .u32 x) { ret; }
            \0";
        assert_eq!(
            ptx_entries(ptx).unwrap(),
            [
                ("saxpy".to_owned(), 4),
                ("spin".to_owned(), 0),
                ("_Z4noneif".to_owned(), 2),
                ("empty".to_owned(), 0),
            ]
        );
        assert_eq!(ptx_entries(b"\x7fELF\x02\x01"), None);
        assert_eq!(
            ptx_entries(b".version 8.0\n.entry broken(.param .u32 a"),
            None
        );
        assert_eq!(ptx_entries(b".version 8.0\n.entry (.param .u32 a)"), None);
    }

    /// A cubin whose `.nv.info.<name>` sections hold `records` each, as the compiler lays
    /// them out: section 1 is the section-name table.
    fn cubin(kernels: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut names = b"\0.shstrtab\0".to_vec();
        let mut bodies = Vec::new();
        for (name, records) in kernels {
            let at = names.len() as u64;
            names.extend_from_slice(format!(".nv.info.{name}\0").as_bytes());
            bodies.push((at, records.clone()));
        }
        let headers = 64 + 64 * (2 + kernels.len());
        let mut image = elf(&[], headers);
        image[0x3C..0x3E].copy_from_slice(&((2 + kernels.len()) as u16).to_le_bytes());
        image[0x3E..0x40].copy_from_slice(&1u16.to_le_bytes());
        let put = |image: &mut Vec<u8>, index: usize, name: u64, bytes: &[u8]| {
            let header = 64 + 64 * index;
            let offset = image.len() as u64;
            image.extend_from_slice(bytes);
            image[header..header + 4].copy_from_slice(&(name as u32).to_le_bytes());
            image[header + 4..header + 8].copy_from_slice(&3u32.to_le_bytes());
            image[header + 0x18..header + 0x20].copy_from_slice(&offset.to_le_bytes());
            image[header + 0x20..header + 0x28]
                .copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        };
        put(&mut image, 1, 1, &names);
        for (index, (name, records)) in bodies.iter().enumerate() {
            put(&mut image, 2 + index, *name, records);
        }
        image
    }

    /// A parameter record of ordinal `ordinal` (`EIATTR_KPARAM_INFO`, 12 bytes of value).
    fn parameter(ordinal: u16) -> Vec<u8> {
        let mut record = vec![RECORD_SIZED, KERNEL_PARAMETER_RECORD, 12, 0, 0, 0, 0, 0];
        record.extend_from_slice(&ordinal.to_le_bytes());
        record.extend_from_slice(&[0, 0, 0, 0xf0, 0x21, 0]);
        record
    }

    #[test]
    fn cubin_entries_count_each_kernels_parameter_records() {
        let other = vec![RECORD_HALF, 0x1b, 0xff, 0, RECORD_BYTE, 0x6d, 0, 0];
        let sized = vec![RECORD_SIZED, 0x37, 4, 0, 0x87, 0, 0, 0];
        let saxpy = [
            parameter(3),
            parameter(2),
            sized.clone(),
            parameter(1),
            parameter(0),
        ];
        let image = cubin(&[
            ("saxpy", [saxpy.concat(), other.clone()].concat()),
            ("none", other.clone()),
        ]);
        assert!(checked_image(&image).is_ok());
        assert_eq!(
            image_entries(&image).unwrap(),
            [("saxpy".to_owned(), 4), ("none".to_owned(), 0)]
        );
        // Ordinals that skip one, a record of an unknown format and a truncated record: no
        // count rather than a wrong one.
        let gap = cubin(&[("gap", [parameter(0), parameter(2)].concat())]);
        assert_eq!(image_entries(&gap), None);
        let unknown = cubin(&[("odd", vec![9, 0x17, 0, 0])]);
        assert_eq!(image_entries(&unknown), None);
        let truncated = cubin(&[("cut", parameter(0)[..10].to_vec())]);
        assert_eq!(image_entries(&truncated), None);

        // In a fatbin: a compressed entry is passed over for the first readable one.
        let fatbin = |entries: &[(u16, u64, &[u8])]| {
            let mut body = Vec::new();
            for (kind, flags, payload) in entries {
                let mut header = vec![0u8; 64];
                header[..2].copy_from_slice(&kind.to_le_bytes());
                header[4..8].copy_from_slice(&64u32.to_le_bytes());
                header[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
                header[0x28..0x30].copy_from_slice(&flags.to_le_bytes());
                body.extend_from_slice(&header);
                body.extend_from_slice(payload);
            }
            let mut image = FATBIN_MAGIC.to_le_bytes().to_vec();
            image.extend_from_slice(&[1, 0, 16, 0]);
            image.extend_from_slice(&(body.len() as u64).to_le_bytes());
            image.extend_from_slice(&body);
            image
        };
        let ptx = b".version 8.0\n.visible .entry k(.param .u32 a, .param .u64 b) { ret; }";
        let both = fatbin(&[(1, 0x8011, b"zstd bytes"), (2, 0x11, &image)]);
        assert!(checked_image(&both).is_ok());
        assert_eq!(image_entries(&both).unwrap().len(), 2);
        let text = fatbin(&[(2, 0x2011, b"lz4 bytes"), (1, 0x11, ptx)]);
        assert_eq!(image_entries(&text).unwrap(), [("k".to_owned(), 2)]);
        assert_eq!(image_entries(&fatbin(&[(2, 0x8011, &image)])), None);
        // Unchecked bytes (a file): an entry header of 0 bytes ends the walk, it never loops.
        let mut stuck = fatbin(&[(2, 0x11, b"")]);
        stuck[16 + 4..16 + 8].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(image_entries(&stuck), None);
    }

    #[test]
    fn elf_sections_must_lie_inside_the_image() {
        assert!(checked_image(&elf(&[(1, 200, 56)], 256)).is_ok());
        // A `.bss`-like section occupies no file bytes, whatever its size.
        assert!(checked_image(&elf(&[(SECTION_WITHOUT_BYTES, 0, 1 << 40)], 256)).is_ok());
        let past = checked_image(&elf(&[(1, 200, 57)], 256)).unwrap_err();
        assert!(
            matches!(&past, Error::BadImage { reason } if reason.contains("past the 256-byte image")),
            "{past}"
        );
        assert!(checked_image(&elf(&[(1, u64::MAX, 2)], 256)).is_err());
        // Section headers that the file does not hold.
        let mut truncated = elf(&[(1, 0, 0)], 256);
        truncated[0x3C..0x3E].copy_from_slice(&100u16.to_le_bytes());
        assert!(checked_image(&truncated).is_err());
        assert!(checked_image(b"\x7fELF\x02\x01").is_err());
        // A program header entry size other than 56 (the driver would read past the image).
        let mut small_entries = elf(&[], 256);
        small_entries[0x20..0x28].copy_from_slice(&255u64.to_le_bytes());
        small_entries[0x36..0x38].copy_from_slice(&1u16.to_le_bytes());
        small_entries[0x38..0x3A].copy_from_slice(&1u16.to_le_bytes());
        assert!(checked_image(&small_entries).is_err());
        // A segment past the image.
        let mut segment = elf(&[], 256);
        segment[0x28..0x30].copy_from_slice(&0u64.to_le_bytes());
        segment[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        segment[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        segment[0x38..0x3A].copy_from_slice(&1u16.to_le_bytes());
        segment[64 + 0x08..64 + 0x10].copy_from_slice(&200u64.to_le_bytes());
        segment[64 + 0x20..64 + 0x28].copy_from_slice(&57u64.to_le_bytes());
        assert!(checked_image(&segment).is_err());
        segment[64 + 0x20..64 + 0x28].copy_from_slice(&56u64.to_le_bytes());
        assert!(checked_image(&segment).is_ok());
        // Extended section numbering: no sections, but a section table offset.
        let extended = elf(&[], 256);
        assert!(checked_image(&extended).is_err());
    }

    #[test]
    fn fatbin_entries_must_lie_inside_the_fatbin() {
        let fatbin = |fat_size: u64, entry_header: u32, payload: u64, len: usize| {
            let mut image = vec![0u8; len];
            image[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
            image[6..8].copy_from_slice(&16u16.to_le_bytes());
            image[8..16].copy_from_slice(&fat_size.to_le_bytes());
            image[20..24].copy_from_slice(&entry_header.to_le_bytes());
            image[24..32].copy_from_slice(&payload.to_le_bytes());
            image
        };
        assert!(checked_image(&fatbin(80, 64, 16, 96)).is_ok());
        assert!(checked_image(&fatbin(81, 64, 16, 96)).is_err());
        assert!(checked_image(&fatbin(80, 64, 17, 96)).is_err());
        assert!(checked_image(&fatbin(80, 0, 16, 96)).is_err());
        assert!(
            checked_image(&fatbin(80, 32, 48, 96)).is_err(),
            "a header the driver reads past"
        );
        assert!(checked_image(&fatbin(80, 64, u64::MAX, 96)).is_err());
    }
}
