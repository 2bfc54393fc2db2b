//! The IDX format of (Fashion-)MNIST, gzipped or not: [`load_idx_images`] reads an
//! `idx3-ubyte` file of `n × rows × cols` pixels, [`load_idx_labels`] an `idx1-ubyte` file of
//! `n` labels, and [`load_fashion_mnist`] the four files of a Fashion-MNIST directory
//! (`train-images-idx3-ubyte.gz`, `train-labels-idx1-ubyte.gz`, `t10k-images-idx3-ubyte.gz`,
//! `t10k-labels-idx1-ubyte.gz`, as Debian's `dataset-fashion-mnist` ships them).
//! [`write_fashion_mnist`] writes an [`ImageSet`] back as those four gzipped files (how
//! the benchmark hands synthetic images to a peer that reads IDX).
//!
//! A file is a 4-byte magic (`0x00 0x00`, the element type `0x08` for unsigned bytes, the
//! number of dimensions), one big-endian `u32` per dimension, then the elements. Malformed
//! input never panics and never makes the loader allocate what the file does not hold: a
//! wrong magic, an impossible dimension, a truncated body or trailing bytes is a
//! [`DataError::Invalid`] naming the file and what is wrong.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::input::{invalid, io_error, open};
use super::{DataError, ImageSet, Images};

/// The element type byte of unsigned bytes.
const UBYTE: u8 = 0x08;
/// The most pixels an image may have (a 4096 × 4096 image), a bound against nonsense
/// dimensions.
const MAX_PIXELS: u64 = 1 << 24;
/// The most images or labels a file may hold.
const MAX_ITEMS: u64 = 1 << 28;

/// The classes of Fashion-MNIST (labels `0..10`).
pub const FASHION_MNIST_CLASSES: usize = 10;

/// The four files of a Fashion-MNIST directory: train images, train labels, test images,
/// test labels.
pub const FASHION_MNIST_FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];

/// Reads the magic and the dimensions of an IDX file of unsigned bytes with `dims`
/// dimensions.
fn header(path: &Path, r: &mut dyn Read, dims: u8) -> Result<Vec<u64>, DataError> {
    let mut magic = [0u8; 4];
    read_exact(path, r, &mut magic, "the 4-byte magic")?;
    let want = [0, 0, UBYTE, dims];
    if magic != want {
        return Err(invalid(
            path,
            format!(
                "bad IDX magic {:02x} {:02x} {:02x} {:02x}: expected {:02x} {:02x} {:02x} {:02x} \
                 (unsigned bytes, {dims} dimension{})",
                magic[0],
                magic[1],
                magic[2],
                magic[3],
                want[0],
                want[1],
                want[2],
                want[3],
                if dims == 1 { "" } else { "s" }
            ),
        ));
    }
    (0..dims)
        .map(|d| {
            let mut b = [0u8; 4];
            read_exact(path, r, &mut b, &format!("dimension {}", d + 1))?;
            Ok(u64::from(u32::from_be_bytes(b)))
        })
        .collect()
}

/// `read_exact`, where running out of bytes is a "truncated" error saying what was read.
fn read_exact(path: &Path, r: &mut dyn Read, buf: &mut [u8], what: &str) -> Result<(), DataError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            invalid(path, format!("truncated: the file ends in {what}"))
        } else {
            io_error(path, e)
        }
    })
}

/// Reads exactly `len` body bytes of `what` and checks that nothing follows them.
fn body(path: &Path, r: &mut dyn Read, len: u64, what: &str) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    // `take` bounds what a lying header can make us allocate to what the file holds.
    r.take(len)
        .read_to_end(&mut out)
        .map_err(|e| io_error(path, e))?;
    if (out.len() as u64) < len {
        return Err(invalid(
            path,
            format!(
                "truncated: the header promises {len} bytes of {what}, the file holds {}",
                out.len()
            ),
        ));
    }
    let mut extra = [0u8; 1];
    match r.read(&mut extra) {
        Ok(0) => Ok(out),
        Ok(_) => Err(invalid(
            path,
            format!("trailing bytes after the {len} bytes of {what} the header promises"),
        )),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Checks one dimension against its bound.
fn dim(path: &Path, name: &str, value: u64, lo: u64, hi: u64) -> Result<usize, DataError> {
    if (lo..=hi).contains(&value) {
        Ok(value as usize)
    } else {
        Err(invalid(
            path,
            format!("bad dimensions: {value} {name} (expected {lo} to {hi})"),
        ))
    }
}

/// Reads an `idx3-ubyte` image file: `n` images of `rows × cols` pixels, row-major.
pub fn load_idx_images(path: &Path) -> Result<Images, DataError> {
    let mut r = open(path)?;
    let d = header(path, &mut r, 3)?;
    let n = dim(path, "images", d[0], 0, MAX_ITEMS)?;
    let rows = dim(path, "rows", d[1], 1, MAX_PIXELS)?;
    let cols = dim(path, "columns", d[2], 1, MAX_PIXELS)?;
    if (rows * cols) as u64 > MAX_PIXELS {
        return Err(invalid(
            path,
            format!("bad dimensions: {rows} x {cols} pixels per image (at most {MAX_PIXELS})"),
        ));
    }
    let pixels = body(path, &mut r, (n * rows * cols) as u64, "pixels")?;
    Ok(Images {
        rows,
        cols,
        pixels,
        labels: Vec::new(),
    })
}

/// Reads an `idx1-ubyte` label file: `n` labels.
pub fn load_idx_labels(path: &Path) -> Result<Vec<u8>, DataError> {
    let mut r = open(path)?;
    let d = header(path, &mut r, 1)?;
    let n = dim(path, "labels", d[0], 0, MAX_ITEMS)?;
    body(path, &mut r, n as u64, "labels")
}

/// Images from `images` with the labels from `labels`, which must be as many and each
/// below `classes`.
pub fn load_labeled(images: &Path, labels: &Path, classes: usize) -> Result<Images, DataError> {
    let mut out = load_idx_images(images)?;
    let l = load_idx_labels(labels)?;
    if l.len() != out.len() {
        return Err(invalid(
            labels,
            format!(
                "{} labels for the {} images of {}",
                l.len(),
                out.len(),
                images.display()
            ),
        ));
    }
    if let Some((i, &bad)) = l
        .iter()
        .enumerate()
        .find(|(_, &c)| usize::from(c) >= classes)
    {
        return Err(invalid(
            labels,
            format!(
                "label {bad} of image {i} is not a class (expected 0 to {})",
                classes - 1
            ),
        ));
    }
    out.labels = l;
    Ok(out)
}

/// The path of `name` in `dir`, or of `name` without its `.gz` when only that exists.
fn in_dir(dir: &Path, name: &str) -> PathBuf {
    let gz = dir.join(name);
    let plain = dir.join(name.trim_end_matches(".gz"));
    if !gz.exists() && plain.exists() {
        plain
    } else {
        gz
    }
}

/// The paths [`load_fashion_mnist`] reads in `dir`, in [`FASHION_MNIST_FILES`] order: each
/// file gzipped, or without its `.gz` when only that exists.
pub fn fashion_mnist_paths(dir: &Path) -> [PathBuf; 4] {
    FASHION_MNIST_FILES.map(|f| in_dir(dir, f))
}

/// Loads Fashion-MNIST from `dir` (its [`FASHION_MNIST_FILES`], gzipped or not): train
/// and test images with labels `0..10`, which must have the same image size.
pub fn load_fashion_mnist(dir: &Path) -> Result<ImageSet, DataError> {
    if !dir.is_dir() {
        return Err(invalid(
            dir,
            format!(
                "not a directory: --data for dnn names the directory holding {} \
                 (tools/fetch-data fashion-mnist)",
                FASHION_MNIST_FILES.join(", ")
            ),
        ));
    }
    let [ti, tl, si, sl] = fashion_mnist_paths(dir);
    let train = load_labeled(&ti, &tl, FASHION_MNIST_CLASSES)?;
    let test = load_labeled(&si, &sl, FASHION_MNIST_CLASSES)?;
    if (test.rows, test.cols) != (train.rows, train.cols) {
        return Err(invalid(
            &si,
            format!(
                "images of {} x {} pixels, but the training images ({}) are {} x {}",
                test.rows,
                test.cols,
                ti.display(),
                train.rows,
                train.cols
            ),
        ));
    }
    if train.is_empty() {
        return Err(invalid(&ti, "no training images"));
    }
    Ok(ImageSet {
        train,
        test,
        classes: FASHION_MNIST_CLASSES,
    })
}

/// Writes `set` into `dir` (created if needed) as the four gzipped [`FASHION_MNIST_FILES`]
/// that [`load_fashion_mnist`] reads; returns their paths in that order. Fails if a label
/// is not below 10 (the loader would refuse it) or an image is larger than the loader
/// accepts.
pub fn write_fashion_mnist(dir: &Path, set: &ImageSet) -> Result<[PathBuf; 4], DataError> {
    let paths = FASHION_MNIST_FILES.map(|f| dir.join(f));
    for (images, at) in [(&set.train, 0), (&set.test, 2)] {
        let (n, rows, cols) = (images.len(), images.rows, images.cols);
        let pixels = (rows * cols) as u64;
        if n as u64 > MAX_ITEMS || pixels > MAX_PIXELS || images.labels.len() != n {
            let why = format!(
                "cannot write {n} images of {rows} x {cols} with {} labels",
                images.labels.len()
            );
            return Err(invalid(&paths[at], why));
        }
        if let Some(&bad) = images
            .labels
            .iter()
            .find(|&&c| usize::from(c) >= FASHION_MNIST_CLASSES)
        {
            return Err(invalid(
                &paths[at + 1],
                format!("label {bad} is not below 10"),
            ));
        }
        let dims = [n as u32, rows as u32, cols as u32];
        write_idx(&paths[at], &dims, &images.pixels[..n * rows * cols])?;
        write_idx(&paths[at + 1], &dims[..1], &images.labels)?;
    }
    Ok(paths)
}

/// Writes one gzipped IDX file of unsigned bytes: the magic, `dims`, then `body`.
fn write_idx(path: &Path, dims: &[u32], body: &[u8]) -> Result<(), DataError> {
    let write = || -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::io::BufWriter::new(std::fs::File::create(path)?);
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        gz.write_all(&[0, 0, UBYTE, dims.len() as u8])?;
        for d in dims {
            gz.write_all(&d.to_be_bytes())?;
        }
        gz.write_all(body)?;
        gz.finish()?.flush()
    };
    write().map_err(|e| io_error(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    /// An IDX file of unsigned bytes with `dims` and `body`.
    fn idx(dims: &[u32], body: &[u8]) -> Vec<u8> {
        let mut out = vec![0, 0, UBYTE, dims.len() as u8];
        for d in dims {
            out.extend(d.to_be_bytes());
        }
        out.extend(body);
        out
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    /// A fresh directory for one test, removed when dropped.
    fn dir(name: &str) -> TempDir {
        TempDir::new(&format!("idx-{name}"))
    }

    /// Writes a small, valid Fashion-MNIST directory (3 train, 2 test images of 2 x 3).
    fn write_set(d: &Path) {
        let train: Vec<u8> = (0..18).collect();
        let test: Vec<u8> = (100..112).collect();
        for (name, bytes) in [
            (FASHION_MNIST_FILES[0], idx(&[3, 2, 3], &train)),
            (FASHION_MNIST_FILES[1], idx(&[3], &[0, 9, 4])),
            (FASHION_MNIST_FILES[2], idx(&[2, 2, 3], &test)),
            (FASHION_MNIST_FILES[3], idx(&[2], &[1, 2])),
        ] {
            std::fs::write(d.join(name), gz(&bytes)).unwrap();
        }
    }

    #[test]
    fn a_gzipped_set_loads_with_its_labels() {
        let tmp = dir("ok");
        let d = tmp.path();
        write_set(d);
        let set = load_fashion_mnist(d).unwrap();
        assert_eq!((set.train.rows, set.train.cols, set.train.len()), (2, 3, 3));
        assert_eq!(set.train.image(1), &[6, 7, 8, 9, 10, 11]);
        assert_eq!(set.train.labels, vec![0, 9, 4]);
        assert_eq!(set.test.labels, vec![1, 2]);
        assert_eq!(set.test.image(1)[0], 106);
        assert_eq!(set.classes, 10);
    }

    #[test]
    fn plain_files_load_too() {
        let tmp = dir("plain");
        let d = tmp.path();
        std::fs::write(d.join("x-images"), idx(&[1, 1, 2], &[7, 8])).unwrap();
        std::fs::write(d.join("x-labels"), idx(&[1], &[3])).unwrap();
        let im = load_labeled(&d.join("x-images"), &d.join("x-labels"), 10).unwrap();
        assert_eq!((im.pixels, im.labels), (vec![7, 8], vec![3]));
    }

    /// Loads `bytes` (gzipped if `zip`) as an image file and returns the error text.
    fn image_error(name: &str, bytes: &[u8], zip: bool) -> String {
        let tmp = dir(name);
        let path = tmp.path().join(name);
        std::fs::write(&path, if zip { gz(bytes) } else { bytes.to_vec() }).unwrap();
        let e = load_idx_images(&path).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
        e
    }

    #[test]
    fn malformed_files_are_errors_naming_the_file_and_the_fault() {
        for zip in [false, true] {
            let e = image_error("magic", &idx(&[1], &[0]), zip);
            assert!(e.contains("bad IDX magic 00 00 08 01"), "{e}");
            let e = image_error("type", &[0, 0, 0x0d, 3, 0, 0, 0, 0], zip);
            assert!(e.contains("bad IDX magic"), "{e}");
            let e = image_error("short-header", &[0, 0, 8, 3, 0, 0], zip);
            assert!(e.contains("truncated: the file ends in dimension 1"), "{e}");
            let e = image_error("empty", &[], zip);
            assert!(
                e.contains("truncated: the file ends in the 4-byte magic"),
                "{e}"
            );
            let e = image_error("zero-rows", &idx(&[1, 0, 2], &[]), zip);
            assert!(e.contains("bad dimensions: 0 rows"), "{e}");
            let e = image_error("huge", &idx(&[1, 65_536, 65_536], &[]), zip);
            assert!(e.contains("bad dimensions"), "{e}");
            // A header that promises more than the file holds allocates only what it holds.
            let e = image_error("truncated", &idx(&[200_000_000, 28, 28], &[1, 2, 3]), zip);
            assert!(e.contains("truncated: the header promises"), "{e}");
            assert!(e.contains("holds 3"), "{e}");
            let e = image_error("trailing", &idx(&[1, 1, 1], &[1, 2]), zip);
            assert!(e.contains("trailing bytes"), "{e}");
        }
        // A gzip stream cut short is an IO error naming the file.
        let whole = gz(&idx(&[4, 2, 2], &[5; 16]));
        let e = image_error("cut-gzip", &whole[..whole.len() - 10], false);
        assert!(!e.is_empty());
    }

    #[test]
    fn labels_must_match_the_images_and_be_classes() {
        let tmp = dir("labels");
        let d = tmp.path();
        std::fs::write(d.join("i"), idx(&[2, 1, 1], &[1, 2])).unwrap();
        std::fs::write(d.join("short"), idx(&[1], &[0])).unwrap();
        std::fs::write(d.join("big"), idx(&[2], &[0, 10])).unwrap();
        let e = load_labeled(&d.join("i"), &d.join("short"), 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("short: 1 labels for the 2 images of"), "{e}");
        let e = load_labeled(&d.join("i"), &d.join("big"), 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("big: label 10 of image 1 is not a class"), "{e}");
        let e = load_idx_labels(&d.join("i")).unwrap_err().to_string();
        assert!(e.contains("bad IDX magic 00 00 08 03"), "{e}");
    }

    #[test]
    fn a_missing_file_or_directory_is_named() {
        let tmp = dir("missing");
        let d = tmp.path();
        write_set(d);
        std::fs::remove_file(d.join(FASHION_MNIST_FILES[3])).unwrap();
        let e = load_fashion_mnist(d).unwrap_err().to_string();
        assert!(e.contains("t10k-labels-idx1-ubyte.gz"), "{e}");
        let e = load_fashion_mnist(&d.join("nope")).unwrap_err().to_string();
        assert!(e.contains("nope: not a directory"), "{e}");
    }

    #[test]
    fn test_images_of_another_size_are_refused() {
        let tmp = dir("sizes");
        let d = tmp.path();
        write_set(d);
        std::fs::write(
            d.join(FASHION_MNIST_FILES[2]),
            gz(&idx(&[2, 3, 2], &[0; 12])),
        )
        .unwrap();
        let e = load_fashion_mnist(d).unwrap_err().to_string();
        assert!(e.contains("images of 3 x 2 pixels"), "{e}");
    }

    #[test]
    fn a_written_set_loads_back_the_same() {
        let tmp = dir("write");
        let d = tmp.path();
        let set = crate::ImageSpec {
            train: 30,
            test: 7,
            ..crate::ImageSpec::preset("tiny").unwrap()
        }
        .generate();
        let paths = write_fashion_mnist(&d.join("sub"), &set).unwrap();
        assert_eq!(paths, fashion_mnist_paths(&d.join("sub")));
        let back = load_fashion_mnist(&d.join("sub")).unwrap();
        assert_eq!((back.train, back.test), (set.train, set.test));
        let mut bad = crate::ImageSpec::preset("tiny").unwrap().generate();
        bad.test.labels[0] = 10;
        let e = write_fashion_mnist(d, &bad).unwrap_err().to_string();
        assert!(e.contains("t10k-labels-idx1-ubyte.gz: label 10"), "{e}");
    }
}
