//! The safetensors header parser on arbitrary files: every tensor it accepts lies inside the
//! file, after the header, with exactly the bytes its dtype and shape need, the tensors tile the
//! data section, and the `safetensors` crate accepts the same file with the same tensors.
#![no_main]

use std::path::Path;

use cacheless_safetensors::header::{nbytes, Header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = Header::from_bytes(Path::new("fuzz.safetensors"), data) else { return };
    let len = data.len() as u64;
    let mut end = h.data_offset();
    let mut sorted: Vec<_> = h.tensors().iter().collect();
    sorted.sort_by_key(|t| t.offset);
    for t in sorted {
        assert!(t.offset >= h.data_offset() && t.end() <= len, "tensor {} at {}+{} lies outside the data of a {len} B file", t.name, t.offset, t.len);
        assert_eq!(Some(t.len), nbytes(t.dtype, &t.shape), "tensor {}: its span does not match its dtype and shape", t.name);
        assert_eq!(t.offset, end, "tensor {} does not follow the one before it", t.name);
        end = t.end();
    }
    assert_eq!(end, len, "the tensors do not cover the data section");
    let st = safetensors::SafeTensors::deserialize(data).expect("accepted here, so by the safetensors crate too");
    assert_eq!(st.len(), h.tensors().len());
    for t in h.tensors() {
        let v = st.tensor(&t.name).expect("the same tensors");
        assert_eq!(v.data(), &data[t.offset as usize..t.end() as usize], "tensor {}: other bytes than the crate's", t.name);
    }
});
