//! Raw HTTP/1.1 over TCP, for tests about what clients that misbehave can do:
//! huge or slow bodies, dribbled headers, idle keep-alive connections. And the
//! server's memory as Linux reports it.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A field of /proc/<pid>/status in kB, e.g. `VmRSS` (resident now) or
/// `VmHWM` (the most it was ever resident).
pub fn memory_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

pub async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect")
}

/// Reads a response head and returns its status line ("" when the server
/// closed first).
pub async fn status_line<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> std::io::Result<String> {
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let status = line.trim_end().to_string();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header == "\r\n" {
            return Ok(status);
        }
    }
}

/// Reads one whole response with a Content-Length body; returns its status line.
pub async fn response<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> std::io::Result<String> {
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    Ok(line.trim_end().to_string())
}

/// True once the server has closed the connection (EOF or reset), false if
/// it sends anything or `within` passes first.
pub async fn closed_within<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    within: Duration,
) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, reader.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// POSTs a `total`-byte body to `path` as fast as the server takes it, either
/// announced with Content-Length or chunked, and returns the status line of
/// the answer. With Content-Length the body is sent only if no answer comes
/// from the head alone within a second.
pub async fn post_big(port: u16, path: &str, total: usize, chunked: bool) -> String {
    let stream = connect(port).await;
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let length = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        format!("Content-Length: {total}")
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: big-1\r\n\
         X-Hub-Signature-256: sha256={zeros}\r\n{length}\r\n\r\n",
        zeros = "0".repeat(64)
    );
    write.write_all(head.as_bytes()).await.expect("write head");
    if !chunked {
        if let Ok(answer) =
            tokio::time::timeout(Duration::from_secs(1), status_line(&mut reader)).await
        {
            return answer.unwrap_or_else(|e| format!("error: {e}"));
        }
    }
    let writer = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            let result = if chunked {
                let mut framed = format!("{n:x}\r\n").into_bytes();
                framed.extend_from_slice(&chunk[..n]);
                framed.extend_from_slice(b"\r\n");
                write.write_all(&framed).await
            } else {
                write.write_all(&chunk[..n]).await
            };
            if result.is_err() {
                return;
            }
            sent += n;
        }
        if chunked {
            let _ = write.write_all(b"0\r\n\r\n").await;
        }
        // Keep the write half open until the answer is read.
        std::future::pending::<()>().await;
    });
    let answer = tokio::time::timeout(Duration::from_secs(60), status_line(&mut reader)).await;
    writer.abort();
    match answer {
        Ok(Ok(line)) => line,
        Ok(Err(e)) => format!("error: {e}"),
        Err(_) => "no answer within 60s".into(),
    }
}
