//! Sharded checkpoints: `model.safetensors.index.json` maps each tensor to the shard holding
//! it; shards are read concurrently under one memory budget.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
#[cfg(feature = "remote")]
use std::sync::atomic::AtomicBool;
#[cfg(feature = "remote")]
use std::sync::Arc;
use std::sync::Mutex;

use cacheless::Progress;
#[cfg(feature = "remote")]
use cacheless_remote::{url_of, Location, ObjectInfo, Remote, Scheme};
use serde::Deserialize;

use crate::arena::SpanReader;
use crate::error::{Error, Result};
use crate::load::{load_from, LoadOptions, Loaded};

/// The index of a sharded checkpoint (or a stand-in for a single file or a folder of them).
#[derive(Debug, Clone)]
pub struct ModelIndex {
    /// The index file, if there is one.
    pub index: Option<PathBuf>,
    /// The shards, in name order.
    pub shards: Vec<PathBuf>,
    /// Tensor name to shard file name, from the index (empty without one).
    pub weight_map: BTreeMap<String, String>,
    /// The index's `metadata` object, if any.
    pub metadata: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct IndexJson {
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    weight_map: BTreeMap<String, String>,
}

fn io(op: &'static str, p: &Path, e: std::io::Error) -> Error {
    cacheless::Error::io(op, p, e).into()
}

impl ModelIndex {
    /// Finds the checkpoint at `path`: an index file (`*.safetensors.index.json`), a single
    /// `.safetensors` file, or a folder holding either (an index is preferred; without one,
    /// every `.safetensors` file in it is a shard).
    pub fn open(path: &Path) -> Result<ModelIndex> {
        #[cfg(feature = "remote")]
        if let Some(url) = url_of(path) {
            let loc = Location::parse(url)?;
            let remote = Remote::connect(&loc, &Default::default())?;
            return ModelIndex::open_remote(&remote, &loc).map(|(index, _)| index);
        }
        let meta = std::fs::metadata(path).map_err(|e| io("stat", path, e))?;
        if !meta.is_dir() {
            if path.to_string_lossy().ends_with(".json") {
                return ModelIndex::from_index(path);
            }
            return Ok(ModelIndex { index: None, shards: vec![path.to_path_buf()], weight_map: BTreeMap::new(), metadata: None });
        }
        let mut indexes = Vec::new();
        let mut files = Vec::new();
        for e in std::fs::read_dir(path).map_err(|e| io("read directory", path, e))? {
            let e = e.map_err(|e| io("read directory", path, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".safetensors.index.json") {
                indexes.push(e.path());
            } else if name.ends_with(".safetensors") && e.path().is_file() {
                files.push(e.path());
            }
        }
        indexes.sort();
        files.sort();
        let preferred = path.join("model.safetensors.index.json");
        match indexes.len() {
            0 if files.is_empty() => Err(Error::invalid(path, "no *.safetensors.index.json and no *.safetensors file in this folder")),
            0 => Ok(ModelIndex { index: None, shards: files, weight_map: BTreeMap::new(), metadata: None }),
            1 => ModelIndex::from_index(&indexes[0]),
            _ if indexes.contains(&preferred) => ModelIndex::from_index(&preferred),
            _ => Err(Error::invalid(
                path,
                format!("several index files ({}): name the one to load", indexes.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")),
            )),
        }
    }

    /// Finds the checkpoint at the URL `loc` (through `remote`) as [`ModelIndex::open`] finds
    /// one in a folder: an index object, a `.safetensors` object, or a prefix (`s3://b/p/`,
    /// `https://host/p/`) holding either. An S3 prefix is listed (the objects directly under
    /// it); a web server has no listing, so a prefix there must hold
    /// `model.safetensors.index.json`. Returns the shards' sizes and ETags too (`path`s are
    /// the URLs).
    #[cfg(feature = "remote")]
    pub fn open_remote(remote: &Remote, loc: &Location) -> Result<(ModelIndex, Vec<ObjectInfo>)> {
        let here = PathBuf::from(loc.to_string());
        let (index, infos) = if !loc.is_prefix() {
            if loc.key().ends_with(".json") {
                let info = remote.head(loc)?;
                (ModelIndex::from_json(&here, &index_text(remote, &info)?)?, None)
            } else {
                let info = remote.head(loc)?;
                (ModelIndex { index: None, shards: vec![here], weight_map: BTreeMap::new(), metadata: None }, Some(vec![info]))
            }
        } else if loc.scheme() == Scheme::Http {
            let index = loc.with_key(format!("{}model.safetensors.index.json", loc.key()));
            let info = remote.head(&index).map_err(|e| {
                Error::from(
                    e.with_note("a web server has no listing: a folder URL must hold model.safetensors.index.json, or name the index or the .safetensors file"),
                )
            })?;
            (ModelIndex::from_json(Path::new(&index.to_string()), &index_text(remote, &info)?)?, None)
        } else {
            let all = remote.list(loc)?;
            // The objects directly under the prefix (not in deeper "folders").
            let here_only: Vec<ObjectInfo> =
                all.into_iter().filter(|o| o.location.key().strip_prefix(loc.key()).is_some_and(|rest| !rest.contains('/'))).collect();
            let indexes: Vec<&ObjectInfo> = here_only.iter().filter(|o| o.location.key().ends_with(".safetensors.index.json")).collect();
            let files: Vec<ObjectInfo> = here_only.iter().filter(|o| o.location.key().ends_with(".safetensors")).cloned().collect();
            let preferred = format!("{}model.safetensors.index.json", loc.key());
            let chosen = match indexes.len() {
                0 if files.is_empty() => return Err(Error::invalid(&here, "no *.safetensors.index.json and no *.safetensors object under this prefix")),
                0 => None,
                1 => Some(indexes[0]),
                _ => match indexes.iter().find(|o| o.location.key() == preferred) {
                    Some(o) => Some(*o),
                    None => {
                        let names = indexes.iter().map(|o| o.location.to_string()).collect::<Vec<_>>().join(", ");
                        return Err(Error::invalid(&here, format!("several index objects ({names}): name the one to load")));
                    }
                },
            };
            match chosen {
                Some(info) => (ModelIndex::from_json(Path::new(&info.location.to_string()), &index_text(remote, info)?)?, None),
                None => {
                    let shards = files.iter().map(|o| PathBuf::from(o.location.to_string())).collect();
                    (ModelIndex { index: None, shards, weight_map: BTreeMap::new(), metadata: None }, Some(files))
                }
            }
        };
        let infos = match infos {
            Some(i) => i,
            None => index.shards.iter().map(|s| remote.head(&Location::parse(&s.to_string_lossy())?)).collect::<cacheless::Result<Vec<_>>>()?,
        };
        Ok((index, infos))
    }

    /// Reads an index file; its shard names must stay inside its folder.
    pub fn from_index(index: &Path) -> Result<ModelIndex> {
        let text = std::fs::read(index).map_err(|e| io("read", index, e))?;
        ModelIndex::from_json(index, &text)
    }

    /// An index file's contents (`index` names it); its shard names must stay inside its folder.
    fn from_json(index: &Path, text: &[u8]) -> Result<ModelIndex> {
        let j: IndexJson = serde_json::from_slice(text)
            .map_err(|e| Error::invalid(index, format!("not a safetensors index (expected {{\"weight_map\": {{tensor: shard}}}}): {e}")))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut names: Vec<&String> = j.weight_map.values().collect();
        names.sort();
        names.dedup();
        let mut shards = Vec::with_capacity(names.len());
        for n in names {
            let p = Path::new(n);
            if n.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
                return Err(Error::invalid(index, format!("shard name '{n}' is not a plain file name in the index's folder")));
            }
            shards.push(dir.join(p));
        }
        Ok(ModelIndex { index: Some(index.to_path_buf()), shards, weight_map: j.weight_map, metadata: j.metadata })
    }

    /// Checks the index against the shards' headers: every tensor it names is in its shard,
    /// and no tensor is in two shards.
    fn check(&self, loaded: &[Loaded]) -> Result<()> {
        let here = self.index.clone().unwrap_or_else(|| self.shards.first().cloned().unwrap_or_default());
        let mut owner: HashMap<&str, &Path> = HashMap::new();
        for l in loaded {
            for t in l.header.tensors() {
                if let Some(other) = owner.insert(&t.name, l.header.path()) {
                    return Err(Error::invalid(&here, format!("tensor '{}' is in both {} and {}", t.name, other.display(), l.header.path().display())));
                }
            }
        }
        for (name, shard) in &self.weight_map {
            let ok = owner.get(name.as_str()).is_some_and(|p| p.file_name().is_some_and(|f| Path::new(shard).file_name() == Some(f)));
            if !ok {
                return Err(Error::invalid(&here, format!("the index puts tensor '{name}' in {shard}, which does not hold it")));
            }
        }
        Ok(())
    }
}

/// An index object larger than this is refused rather than read (the largest checkpoints'
/// indexes are a few MiB).
#[cfg(feature = "remote")]
const MAX_INDEX: u64 = 64 << 20;

/// The bytes of the index object `info` describes.
#[cfg(feature = "remote")]
fn index_text(remote: &Remote, info: &ObjectInfo) -> Result<Vec<u8>> {
    if info.size > MAX_INDEX {
        let here = PathBuf::from(info.location.to_string());
        return Err(Error::invalid(&here, format!("{} B is too large for a safetensors index (at most {MAX_INDEX} B)", info.size)));
    }
    let mut text = vec![0u8; cacheless::conv::usize_of(info.size)];
    cacheless_remote::read_into(remote, info, 0, &mut text, &AtomicBool::new(false))?;
    Ok(text)
}

/// Loads every shard of the checkpoint at `path` (see [`ModelIndex::open`]; a URL: see
/// [`ModelIndex::open_remote`], every shard through one client), `parallel` at a time, all
/// under `opts`' one memory budget, and checks them against the index. Returns the shards in
/// [`ModelIndex::shards`] order. The first failure stops the others (it cancels `progress`)
/// and is returned.
pub fn load_model(path: &Path, opts: &LoadOptions, parallel: usize, progress: &Progress) -> Result<(ModelIndex, Vec<Loaded>)> {
    #[cfg(feature = "remote")]
    if let Some(url) = url_of(path) {
        let loc = Location::parse(url)?;
        let remote = Arc::new(Remote::connect(&loc, &opts.remote)?);
        let (index, infos) = ModelIndex::open_remote(&remote, &loc)?;
        progress.add_total_bytes(infos.iter().map(|i| i.size).sum());
        return load_shards(path, index, parallel, progress, |i, _| Ok(SpanReader::from_object(remote.clone(), infos[i].clone())));
    }
    let index = ModelIndex::open(path)?;
    for s in &index.shards {
        let len = std::fs::metadata(s).map_err(|e| io("stat", s, e))?.len();
        progress.add_total_bytes(len);
    }
    load_shards(path, index, parallel, progress, |_, shard| SpanReader::open(shard, opts))
}

/// Loads `index`'s shards, each opened by `open` (its position and path), `parallel` at a time.
fn load_shards(
    path: &Path,
    index: ModelIndex,
    parallel: usize,
    progress: &Progress,
    open: impl Fn(usize, &Path) -> Result<SpanReader> + Sync,
) -> Result<(ModelIndex, Vec<Loaded>)> {
    let queue = Mutex::new(index.shards.iter().enumerate());
    let results: Mutex<Vec<Option<Loaded>>> = Mutex::new((0..index.shards.len()).map(|_| None).collect());
    let first: Mutex<Option<Error>> = Mutex::new(None);
    let workers = parallel.clamp(1, index.shards.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, shard)) = next else { return };
                if progress.is_cancelled() {
                    return;
                }
                match open(i, shard).and_then(|sr| load_from(sr, None, progress, false)) {
                    Ok(l) => results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(l),
                    Err(e) => {
                        let mut f = first.lock().unwrap_or_else(|e| e.into_inner());
                        if f.is_none() {
                            *f = Some(e);
                            progress.cancel();
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = first.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let loaded: Vec<Loaded> = results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().flatten().collect();
    if loaded.len() != index.shards.len() {
        let p = index.index.clone().unwrap_or_else(|| path.to_path_buf());
        return Err(cacheless::Error::new(cacheless::ErrorKind::Interrupted, "load", p, "interrupted").into());
    }
    index.check(&loaded)?;
    Ok((index, loaded))
}
